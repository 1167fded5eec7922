//! Data-parallel training, as Horovod and PyTorch's DDP do it: every rank
//! (process) holds a replica of the model, computes gradients on its shard
//! of the data, and the gradients are averaged over the ranks before each
//! update, so every replica takes the same step.
//!
//! The collectives come from an existing engine, MPI, through the `mpi`
//! crate (rsmpi) with the cargo feature `mpi`: `mpi::topology::SimpleCommunicator`
//! (e.g. `mpi::initialize()?.world()`) implements [`Collectives`]. Without
//! the feature only [`SingleProcess`] (one rank, every collective the
//! identity) is there, so code written against [`Collectives`] also runs in
//! one process. See the README for installing OpenMPI and `mpirun`.
//!
//! - [`allreduce_gradients`] averages a list of gradients over the ranks:
//!   the dense ones of each dtype are packed into **one** contiguous buffer,
//!   all-reduced in one call and unpacked (tensor fusion, as Horovod's);
//!   sparse ones ([`IndexedSlices`](crate::IndexedSlices)) are all-gathered
//!   (indices and values, a different row count per rank, one call per
//!   dtype for all of them) and become the concatenation of every rank's
//!   rows with values divided by the number of ranks.
//! - [`broadcast_variables`] copies the variables of one rank (usually 0)
//!   to all others, one fused broadcast per dtype: the replicas start equal.
//! - [`DistributedOptimizer`] wraps any [`Optimizer`]: it averages the
//!   gradients, then lets the wrapped optimizer apply them.
//!
//! ```
//! use gradtape::distributed::{broadcast_variables, DistributedOptimizer, SingleProcess};
//! use gradtape::optim::{Optimizer, Sgd};
//! use gradtape::{GradientTape, Tensor, Variable};
//! // with MPI: `let world = mpi::initialize().unwrap().world();` instead
//! let comm = SingleProcess;
//! let w = Variable::new(Tensor::vector(&[1.0f32, 2.0]));
//! broadcast_variables(&comm, &[w.clone()], 0)?;          // rank 0's weights everywhere
//! let mut opt = DistributedOptimizer::new(Sgd::new(0.5), comm);
//! let tape = GradientTape::new();
//! let loss = tape.record(|| w.read().square()?.sum_all())?; // this rank's shard
//! opt.minimize(&tape, &loss, &[w.clone()])?;              // averaged, then applied
//! assert_eq!(w.read().to_vec::<f32>()?, vec![0.0, 0.0]);
//! assert_eq!(opt.last_traffic().allreduce_bytes, 8);      // one f32 buffer of 2
//! # Ok::<(), gradtape::Error>(())
//! ```
//!
//! Every rank must call the same functions in the same order with lists of
//! the same length, dtypes and shapes (and the same gradients `None` or
//! sparse): each call first exchanges a short description of its list, and
//! when the ranks disagree every rank returns the same error (naming the
//! first gradient or variable that differs) instead of deadlocking or
//! mixing unrelated buffers. A rank that fails locally in the middle of a
//! call (out of memory, say) cannot tell the others, which then wait, as
//! with any MPI program.

#[cfg(feature = "mpi")]
mod mpi_comm;
mod reduce;

pub use reduce::{allreduce_gradients, allreduce_gradients_with, AllreduceOptions, Traffic};

use crate::autodiff::gradient::Gradient;
use crate::autodiff::variable::Variable;
use crate::error::{Error, Result};
use crate::optim::Optimizer;
use crate::tensor::{alloc, DType, Tensor};

/// A buffer handed to a collective.
#[derive(Debug)]
pub enum Buffer<'a> {
    /// `f32` elements.
    F32(&'a [f32]),
    /// `f64` elements.
    F64(&'a [f64]),
    /// `i32` elements.
    I32(&'a [i32]),
    /// `i64` elements.
    I64(&'a [i64]),
}

/// A buffer a collective writes into.
#[derive(Debug)]
pub enum BufferMut<'a> {
    /// `f32` elements.
    F32(&'a mut [f32]),
    /// `f64` elements.
    F64(&'a mut [f64]),
    /// `i32` elements.
    I32(&'a mut [i32]),
    /// `i64` elements.
    I64(&'a mut [i64]),
}

impl BufferMut<'_> {
    /// The number of elements.
    pub fn len(&self) -> usize {
        match self {
            BufferMut::F32(b) => b.len(),
            BufferMut::F64(b) => b.len(),
            BufferMut::I32(b) => b.len(),
            BufferMut::I64(b) => b.len(),
        }
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Buffer<'_> {
    /// The number of elements.
    pub fn len(&self) -> usize {
        match self {
            Buffer::F32(b) => b.len(),
            Buffer::F64(b) => b.len(),
            Buffer::I32(b) => b.len(),
            Buffer::I64(b) => b.len(),
        }
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The collectives data-parallel training needs, over a group of ranks.
/// Every rank of the group must make the same calls in the same order.
///
/// With the feature `mpi`, `mpi::topology::SimpleCommunicator` implements
/// it with `MPI_Allreduce`, `MPI_Allgatherv` and `MPI_Bcast`; a buffer of
/// more than `i32::MAX` elements (MPI's count type) is an error.
/// [`SingleProcess`] is the group of one. (The methods are not called
/// `rank` and `size` so as not to clash with `mpi::traits::Communicator`'s.)
pub trait Collectives {
    /// This process's rank, in `0..num_ranks()`.
    fn this_rank(&self) -> usize;

    /// The number of ranks in the group.
    fn num_ranks(&self) -> usize;

    /// Replaces `buf` by the element-wise sum of every rank's `buf` (all
    /// ranks pass the same length and type).
    fn all_reduce_sum(&self, buf: BufferMut<'_>) -> Result<()>;

    /// Writes into `recv` the concatenation, in rank order, of every rank's
    /// `send`; rank `r` sends `counts[r]` elements (`counts` is the same on
    /// every rank, `recv` holds their sum, all of `send`'s type).
    fn all_gather(&self, send: Buffer<'_>, counts: &[usize], recv: BufferMut<'_>) -> Result<()>;

    /// Overwrites `buf` on every rank by its contents on `root`.
    fn broadcast(&self, buf: BufferMut<'_>, root: usize) -> Result<()>;
}

/// The group of one process: every collective leaves its buffer as it is
/// (the average over one rank is the value itself). Code written against
/// [`Collectives`] runs with it without MPI.
#[derive(Clone, Copy, Debug, Default)]
pub struct SingleProcess;

impl Collectives for SingleProcess {
    fn this_rank(&self) -> usize {
        0
    }

    fn num_ranks(&self) -> usize {
        1
    }

    fn all_reduce_sum(&self, _buf: BufferMut<'_>) -> Result<()> {
        Ok(())
    }

    fn all_gather(&self, send: Buffer<'_>, counts: &[usize], recv: BufferMut<'_>) -> Result<()> {
        const OP: &str = "SingleProcess::all_gather";
        if counts != [send.len()] || recv.len() != send.len() {
            return Err(Error::invalid(
                OP,
                format!(
                    "counts {counts:?}, send {} and recv {} elements: expected [n], n and n",
                    send.len(),
                    recv.len()
                ),
            ));
        }
        match (send, recv) {
            (Buffer::F32(s), BufferMut::F32(r)) => r.copy_from_slice(s),
            (Buffer::F64(s), BufferMut::F64(r)) => r.copy_from_slice(s),
            (Buffer::I32(s), BufferMut::I32(r)) => r.copy_from_slice(s),
            (Buffer::I64(s), BufferMut::I64(r)) => r.copy_from_slice(s),
            _ => return Err(Error::invalid(OP, "send and recv buffers of different types")),
        }
        Ok(())
    }

    fn broadcast(&self, _buf: BufferMut<'_>, root: usize) -> Result<()> {
        if root != 0 {
            return Err(Error::invalid(
                "SingleProcess::broadcast",
                format!("root {root} out of range for 1 rank"),
            ));
        }
        Ok(())
    }
}

/// The code of a dtype in the descriptions ranks exchange.
fn dtype_code(d: DType) -> i64 {
    match d {
        DType::F32 => 1,
        DType::F64 => 2,
        DType::I32 => 3,
        DType::I64 => 4,
        DType::Bool => 5,
        DType::C64 => 6,
        DType::C128 => 7,
        DType::F16 => 8,
        DType::BF16 => 9,
    }
}

fn dtype_name(code: i64) -> &'static str {
    match code {
        1 => "f32",
        2 => "f64",
        3 => "i32",
        4 => "i64",
        5 => "bool",
        6 => "c64",
        7 => "c128",
        8 => "f16",
        9 => "bf16",
        _ => "?",
    }
}

/// One entry of an exchanged description: kind (0 none, 1 dense, 2
/// sparse, 3 variable), dtype code, rank, dims.
fn describe(out: &mut Vec<i64>, kind: i64, dtype: DType, shape: &[usize]) {
    out.extend([kind, dtype_code(dtype), shape.len() as i64]);
    out.extend(shape.iter().map(|&d| d as i64));
}

/// Splits a description back into entries `(kind, dtype code, dims)`.
fn entries(desc: &[i64]) -> Vec<(i64, i64, &[i64])> {
    let mut out = Vec::new();
    let mut i = 0;
    while i + 3 <= desc.len() {
        let n = desc[i + 2].max(0) as usize;
        let end = (i + 3 + n).min(desc.len());
        out.push((desc[i], desc[i + 1], &desc[i + 3..end]));
        i = end;
    }
    out
}

fn entry_text(e: Option<&(i64, i64, &[i64])>) -> String {
    match e {
        None => "nothing".into(),
        Some((0, _, _)) => "None".into(),
        Some((kind, dtype, dims)) => {
            let kind = match kind {
                1 => "a dense",
                2 => "a sparse",
                _ => "a",
            };
            format!("{kind} {} {dims:?}", dtype_name(*dtype))
        }
    }
}

/// The most words of a peer's description [`agree`] gathers (2^24, 128
/// MiB per rank; a list of variables takes `3 + rank` words each): a longer
/// one, as a negative one, is refused on every rank alike (each sees the
/// same lengths) instead of sizing a buffer that cannot be allocated.
const MAX_DESC_WORDS: usize = 1 << 24;

/// The communicator's number of ranks, checked: at least one, with this
/// rank among them (a group of zero ranks would make the average of the
/// gradients a division by zero).
pub(crate) fn num_ranks(comm: &dyn Collectives, op: &'static str) -> Result<usize> {
    let (size, me) = (comm.num_ranks(), comm.this_rank());
    if size == 0 || me >= size {
        return Err(Error::invalid(
            op,
            format!(
                "the communicator reports rank {me} of {size} ranks (expected at least one rank, this one among them)"
            ),
        ));
    }
    Ok(size)
}

/// The sum of buffer lengths, or an error when it overflows `usize`.
pub(crate) fn total_len(op: &'static str, lens: impl IntoIterator<Item = usize>) -> Result<usize> {
    lens.into_iter()
        .try_fold(0usize, usize::checked_add)
        .ok_or_else(|| Error::invalid(op, "the buffers' total length overflows usize"))
}

/// Exchanges `desc` (this rank's description of its list of `what`s) and
/// fails on every rank alike when the ranks' descriptions differ, naming
/// the first entry that differs. Two small collectives.
fn agree(comm: &dyn Collectives, op: &'static str, what: &str, desc: &[i64]) -> Result<()> {
    let size = num_ranks(comm, op)?;
    let hash = desc.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| {
        (h ^ x as u64).wrapping_mul(0x0100_0000_01b3) // FNV-1a over words
    });
    let header = [hash as i64, desc.len() as i64];
    let words = size
        .checked_mul(2)
        .ok_or_else(|| Error::invalid(op, format!("{size} ranks are too many")))?;
    let mut all = alloc::try_filled(op, words, 0i64)?;
    comm.all_gather(
        Buffer::I64(&header),
        &alloc::try_filled(op, size, 2)?,
        BufferMut::I64(&mut all),
    )?;
    if all.chunks(2).all(|h| h == header) {
        return Ok(());
    }
    // they differ: gather the descriptions themselves, to say where (each
    // rank sees the same lengths, so all refuse a bad one alike)
    let counts = all
        .chunks(2)
        .enumerate()
        .map(|(r, h)| match usize::try_from(h[1]) {
            Ok(c) if c <= MAX_DESC_WORDS => Ok(c),
            _ => Err(Error::invalid(
                op,
                format!(
                    "the ranks' {what}s differ, and rank {r} describes its {what}s in {} words \
                     (expected 0 to {MAX_DESC_WORDS})",
                    h[1]
                ),
            )),
        })
        .collect::<Result<Vec<usize>>>()?;
    let mut descs = alloc::try_filled(op, total_len(op, counts.iter().copied())?, 0i64)?;
    comm.all_gather(Buffer::I64(desc), &counts, BufferMut::I64(&mut descs))?;
    let mut per_rank = Vec::with_capacity(size);
    let mut off = 0;
    for &c in &counts {
        per_rank.push(entries(&descs[off..off + c]));
        off += c;
    }
    let first = &per_rank[0];
    for (r, other) in per_rank.iter().enumerate().skip(1) {
        let n = first.len().max(other.len());
        if let Some(i) = (0..n).find(|&i| first.get(i) != other.get(i)) {
            return Err(Error::invalid(
                op,
                format!(
                    "the ranks' {what}s differ: {what} {i} is {} on rank 0 but {} on rank {r} \
                     (rank 0 has {} {what}s, rank {r} has {}); every rank must pass the same dtypes, \
                     shapes and kinds in the same order",
                    entry_text(first.get(i)),
                    entry_text(other.get(i)),
                    first.len(),
                    other.len()
                ),
            ));
        }
    }
    Err(Error::invalid(op, format!("the ranks' {what}s differ")))
}

/// Copies the values of `vars` on rank `root` to every other rank (Horovod's
/// `broadcast_variables`): one fused broadcast per dtype after checking that
/// every rank passes the same dtypes and shapes. Variables of dtype `f32`,
/// `f64`, `i32` and `i64` are supported (the optimizers' slots and step
/// counters too: pass `opt.variables()` to broadcast an optimizer's state).
///
/// ```
/// use gradtape::distributed::{broadcast_variables, SingleProcess};
/// use gradtape::{Tensor, Variable};
/// let v = Variable::new(Tensor::scalar(1.5f64));
/// broadcast_variables(&SingleProcess, &[v.clone()], 0)?;
/// assert_eq!(v.read().to_scalar::<f64>()?, 1.5);
/// assert!(broadcast_variables(&SingleProcess, &[v], 1).is_err()); // no rank 1
/// # Ok::<(), gradtape::Error>(())
/// ```
pub fn broadcast_variables(comm: &impl Collectives, vars: &[Variable], root: usize) -> Result<()> {
    const OP: &str = "broadcast_variables";
    let size = num_ranks(comm, OP)?;
    if root >= size {
        return Err(Error::invalid(OP, format!("root {root} out of range for {size} ranks")));
    }
    let values: Vec<Tensor> = vars.iter().map(Variable::read).collect();
    let mut desc = Vec::new();
    for t in &values {
        describe(&mut desc, 3, t.dtype(), t.shape());
    }
    agree(comm, OP, "variable", &desc)?;
    if let Some(t) = values
        .iter()
        .find(|t| !matches!(t.dtype(), DType::F32 | DType::F64 | DType::I32 | DType::I64))
    {
        return Err(Error::UnsupportedDType {
            op: OP,
            dtype: t.dtype(),
            expected: "f32, f64, i32 or i64 variables",
        });
    }
    let me = comm.this_rank();
    macro_rules! fused {
        ($ty:ty, $variant:ident) => {{
            let picked: Vec<usize> = (0..vars.len())
                .filter(|&i| values[i].dtype() == <$ty as crate::tensor::Element>::DTYPE)
                .collect();
            if !picked.is_empty() {
                let total = total_len(OP, picked.iter().map(|&i| values[i].numel()))?;
                let mut buf: Vec<$ty> = crate::tensor::alloc::try_vec(OP, total)?;
                for &i in &picked {
                    buf.extend_from_slice(&values[i].values::<$ty>(OP)?);
                }
                comm.broadcast(BufferMut::$variant(&mut buf), root)?;
                if me != root {
                    let mut off = 0;
                    for &i in &picked {
                        let n = values[i].numel();
                        let t = Tensor::from_vec(buf[off..off + n].to_vec(), values[i].shape())?;
                        vars[i].assign(&t)?;
                        off += n;
                    }
                }
            }
        }};
    }
    fused!(f32, F32);
    fused!(f64, F64);
    fused!(i32, I32);
    fused!(i64, I64);
    Ok(())
}

/// Wraps an optimizer for data-parallel training (Horovod's
/// `DistributedOptimizer`): [`apply`](Optimizer::apply) (and so
/// `apply_gradients` and `minimize`) first averages the gradients over the
/// ranks with [`allreduce_gradients_with`], then hands them to the wrapped
/// optimizer. Everything else is the wrapped optimizer's (its name,
/// variables, step counter), so checkpoints do not change.
///
/// Start every rank from the same weights ([`broadcast_variables`]) and
/// give each rank its own shard of each batch; with equal shards and a
/// loss that is a mean over the batch, the averaged gradient is the
/// gradient of the whole batch.
///
/// ```
/// use gradtape::distributed::{DistributedOptimizer, SingleProcess};
/// use gradtape::optim::{Adam, Optimizer};
/// let opt = DistributedOptimizer::new(Adam::new(1e-3), SingleProcess).sparse_as_dense(true);
/// assert_eq!(opt.iterations(), 0);
/// assert_eq!(opt.name(), opt.inner().name());
/// ```
pub struct DistributedOptimizer<O, C> {
    inner: O,
    comm: C,
    options: AllreduceOptions,
    traffic: Traffic,
}

impl<O: Optimizer, C: Collectives> DistributedOptimizer<O, C> {
    /// Wraps `inner`; gradients are averaged over `comm`'s ranks.
    pub fn new(inner: O, comm: C) -> Self {
        DistributedOptimizer {
            inner,
            comm,
            options: AllreduceOptions::default(),
            traffic: Traffic::default(),
        }
    }

    /// Whether sparse gradients are made dense before the reduction (one
    /// fused all-reduce then, instead of all-gathers; Horovod's
    /// `sparse_as_dense`). Default false.
    pub fn sparse_as_dense(mut self, yes: bool) -> Self {
        self.options.sparse_as_dense = yes;
        self
    }

    /// The wrapped optimizer.
    pub fn inner(&self) -> &O {
        &self.inner
    }

    /// The wrapped optimizer, mutably.
    pub fn inner_mut(&mut self) -> &mut O {
        &mut self.inner
    }

    /// The communicator.
    pub fn communicator(&self) -> &C {
        &self.comm
    }

    /// What the last [`apply`](Optimizer::apply) sent through the
    /// collectives.
    pub fn last_traffic(&self) -> Traffic {
        self.traffic
    }
}

impl<O: Optimizer, C: Collectives> Optimizer for DistributedOptimizer<O, C> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn apply(&mut self, pairs: Vec<(Option<Gradient>, Variable)>) -> Result<()> {
        let (grads, vars): (Vec<Option<Gradient>>, Vec<Variable>) = pairs.into_iter().unzip();
        let (grads, traffic) = reduce::reduce(&self.comm, &grads, &self.options)?;
        self.traffic = traffic;
        self.inner.apply(grads.into_iter().zip(vars).collect())
    }

    fn build(&mut self, vars: &[Variable]) -> Result<()> {
        self.inner.build(vars)
    }

    fn variables(&self) -> Vec<Variable> {
        self.inner.variables()
    }

    fn iterations(&self) -> u64 {
        self.inner.iterations()
    }

    fn learning_rate(&self) -> f64 {
        self.inner.learning_rate()
    }

    fn set_learning_rate(&mut self, lr: f64) -> Result<()> {
        self.inner.set_learning_rate(lr)
    }

    fn finalize_variable_values(&self, vars: &[Variable]) -> Result<()> {
        self.inner.finalize_variable_values(vars)
    }

    fn skipped(&self) -> &[String] {
        self.inner.skipped()
    }
}
