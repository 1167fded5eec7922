//! Empty: this package holds gradtape's integration tests (`tests/`).
