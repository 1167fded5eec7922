//! Signal processing, as TensorFlow's `tf.signal`.
//!
//! - `fft.rs`: `fft`/`ifft`/`rfft`/`irfft` and their 2-D and 3-D forms

mod fft;
