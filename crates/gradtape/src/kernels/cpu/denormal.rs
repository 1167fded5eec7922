//! Flushing denormal floats to zero inside compute kernels.
//!
//! Gradients that decay through many steps (an RNN's cotangents through 64
//! `tanh` steps) reach the denormal range, where x86 FMA units take a slow
//! microcode path: the `rnn_grad` bench ran 6x slower in its matrix products
//! for that reason alone. TensorFlow flushes denormals to zero in its kernels
//! by default; gradtape does the same: while a GEMM-based kernel runs, the
//! calling thread has FTZ and DAZ set (and restored afterwards); the
//! compute threads of `workers` take on the caller's setting for each job.
//! [`set_flush_denormals`] turns this off (IEEE gradual underflow).
//! Other architectures are left as they are.

use std::sync::atomic::{AtomicBool, Ordering};

static FLUSH: AtomicBool = AtomicBool::new(true);

/// Chooses whether compute kernels flush denormal floats to zero (the
/// default, as TensorFlow) or keep IEEE gradual underflow. Affects matrix
/// products and convolutions; results differ only for values below
/// `f32::MIN_POSITIVE` (or `f64::MIN_POSITIVE`).
///
/// ```
/// use gradtape::Tensor;
/// let tiny = Tensor::from_vec(vec![1e-39f32], &[1, 1])?; // a denormal
/// let one = Tensor::from_vec(vec![1.0f32], &[1, 1])?;
/// assert_eq!(tiny.matmul(&one)?.item()?, 0.0); // flushed (the default)
/// gradtape::set_flush_denormals(false);
/// assert!(tiny.matmul(&one)?.item()? > 0.0);
/// gradtape::set_flush_denormals(true);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub fn set_flush_denormals(on: bool) {
    FLUSH.store(on, Ordering::Relaxed);
}

/// Restores the thread's float control word on drop.
pub(crate) struct FlushGuard(#[cfg(target_arch = "x86_64")] Option<u32>);

#[cfg(target_arch = "x86_64")]
#[allow(deprecated)] // the intrinsics are the documented way to reach MXCSR
fn set_bits(on: bool) -> u32 {
    use std::arch::x86_64::{_mm_getcsr, _mm_setcsr};
    const FTZ_DAZ: u32 = 0x8040;
    // SAFETY: reading and writing MXCSR only changes this thread's SSE
    // rounding/denormal modes; the masked-exception bits are kept.
    unsafe {
        let old = _mm_getcsr();
        _mm_setcsr(if on { old | FTZ_DAZ } else { old & !FTZ_DAZ });
        old
    }
}

/// Sets the kernel's denormal mode on this thread until the guard drops.
#[inline]
pub(crate) fn flush_guard() -> FlushGuard {
    #[cfg(target_arch = "x86_64")]
    {
        FlushGuard(Some(set_bits(FLUSH.load(Ordering::Relaxed))))
    }
    #[cfg(not(target_arch = "x86_64"))]
    FlushGuard()
}

impl Drop for FlushGuard {
    fn drop(&mut self) {
        #[cfg(target_arch = "x86_64")]
        if let Some(old) = self.0 {
            #[allow(deprecated)]
            // SAFETY: restores the value read when the guard was made.
            unsafe {
                std::arch::x86_64::_mm_setcsr(old)
            };
        }
    }
}
