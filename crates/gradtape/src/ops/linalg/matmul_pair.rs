//! The two products of an eager `matmul` gradient as one parallel job.
//!
//! The rule of `C = op(A) op(B)` computes the cotangents of both operands
//! when both are needed (a layer's input and weight: `dX = dY·Wᵀ`,
//! `dW = Xᵀ·dY`): two products that read the same operands and do not
//! depend on each other. Run one after the other, each product is split
//! over the compute threads: a fork and a join per product, and every
//! thread packs the shared operand. Here they run as one job of two tasks
//! ([`workers::map_small`]), each product whole on one thread
//! (`sgemm::one_thread`), as the compiled executor runs its pairs
//! (`function/compile/pair_products.rs`).
//!
//! **Values.** Under `one_thread` the `f32` GEMM computes an output that it
//! would split by rows or columns in one piece, each element the same sum in
//! the same order; a split of the shared dimension (a thin output) is
//! kept, its pieces run one after the other; other kernels' splits (a
//! batched product's, the `gemm` crate's) follow the pool's size, not who
//! runs them, and run piece after piece inside the job. So the pair gives
//! the bits of the rule run one product after the other.
//!
//! **When.** Only where the products are plain eager kernels, on this
//! thread's behalf alone: nothing listens on the calling thread (no tape
//! records the backward pass for a higher derivative, no trace, no forward
//! accumulator: their bookkeeping is per thread, and the helper thread
//! would run the products unseen) and no trace observes tensors; `f32`
//! host operands on a CPU with the AVX-512 kernel (where the bits and the
//! times were measured); more than one compute thread. And only at the
//! shapes where a pair was measured to pay ([`worth`]): products the
//! GEMM would split over the threads (at least its splitting bound,
//! [`MIN_FLOPS`] multiply-adds) with every dimension at least [`MIN_DIM`]
//! (the shapes measured: the layers of `transformer_step`, of the `gpt`
//! example and of `mlp_step`; thinner products were left as they were).
//!
//! Not below the splitting bound, where each product runs on the calling
//! thread alone and a pair would run the two side by side: the eager
//! `rnn_grad` bench (64 steps whose recurrent product `[32,128] @
//! [128,128]` paired its gradient's two products, 2^19 multiply-adds
//! each) went from 3.45 to 4.15 ms a step on two threads (medians of 8
//! rounds of alternating processes, slower in all 8): a job per pair (and,
//! presumably, the operands' trips to the other core's caches) cost more
//! than the few microseconds of arithmetic the second thread took over.
//! (The measurements: `docs/compiler-notes.md`, "Eager training steps
//! beside the traced ones".)

use std::cell::Cell;

use crate::error::{Error, Result};
use crate::kernels::cpu::workers;
use crate::tensor::{DType, Tensor};

thread_local! {
    /// Whether matmul rules run on this thread may pair their products
    /// (tests turn it off to compare with the sequential rule).
    pub static PAIRS: Cell<bool> = const { Cell::new(true) };
    /// Pairs run by rules on this thread (for the tests).
    static PAIRED: Cell<usize> = const { Cell::new(0) };
}

/// Products with fewer multiply-adds than this stay one after the other
/// (the GEMM's splitting bound, `PAR_FLOPS` of `sgemm`, eagerly).
pub const MIN_FLOPS: usize = 1 << 20;

/// Products pair only when every dimension is at least this.
pub const MIN_DIM: usize = 64;

/// Whether the rule of `op(a) @ op(b)` (`ta`: `a` transposed) with
/// cotangent `g` runs its two products as a pair (see the module's docs).
pub(crate) fn worth(a: &Tensor, b: &Tensor, g: &Tensor, ta: bool) -> bool {
    if cfg!(feature = "openblas") || !cfg!(target_arch = "x86_64") || !PAIRS.with(Cell::get) {
        return false;
    }
    if crate::dispatch::listening() || crate::tensor::observe::observing() || workers::threads() < 2 {
        return false;
    }
    let host32 = |t: &Tensor| t.dtype() == DType::F32 && t.device_buffer().is_none();
    if !(host32(a) && host32(b) && host32(g) && a.rank() >= 2 && b.rank() >= 2 && g.rank() >= 2) {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    if !crate::kernels::cpu::sgemm::available() {
        return false;
    }
    // the product's rows and columns (the cotangent's last two dims) and
    // its shared dimension; each of the rule's products does as many
    // multiply-adds as the product itself
    let (gs, s) = (g.shape(), a.shape());
    let (m, n) = (gs[gs.len() - 2], gs[gs.len() - 1]);
    let k = if ta { s[s.len() - 2] } else { s[s.len() - 1] };
    // (a batch times a shared matrix: the rule folds the batch into rows)
    let m = if b.rank() == 2 { g.numel() / n.max(1) } else { m };
    let flops = g.numel().saturating_mul(k);
    flops >= MIN_FLOPS && m.min(n).min(k) >= MIN_DIM
}

/// `(fa(), fb())`, run as one job of two tasks, each on one thread with
/// its products whole (see the module's docs on values).
pub(crate) fn both(
    fa: impl Fn() -> Result<Tensor> + Sync,
    fb: impl Fn() -> Result<Tensor> + Sync,
) -> (Result<Tensor>, Result<Tensor>) {
    PAIRED.with(|c| c.set(c.get() + 1));
    let mut done = workers::map_small(2, |t| Some(one_thread(|| if t == 0 { fa() } else { fb() })));
    let unran = || Err(Error::invalid("matmul", "a product of the gradient's pair did not run"));
    let second = done[1].take().unwrap_or_else(unran);
    let first = done[0].take().unwrap_or_else(unran);
    (first, second)
}

/// `f()` with products computed whole on the calling thread.
fn one_thread<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    return crate::kernels::cpu::sgemm::one_thread(f);
    #[cfg(not(target_arch = "x86_64"))]
    f()
}

/// How many matmul rules on this thread ran their two products as a pair.
pub fn pairs_run() -> usize {
    PAIRED.with(Cell::get)
}
