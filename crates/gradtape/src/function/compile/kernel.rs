//! The fused elementwise kernel: a register program run over chunks.
//!
//! A [`Program`] is what [`fuse`](super::fuse) makes of a group of
//! elementwise nodes: straight-line code over *registers*, each holding one
//! chunk of the group's shape (whole [`CHUNK`]s of elements, as many as
//! the program's registers fit in the L1 cache). The kernel walks the
//! elements chunk by chunk (chunks of a large tensor spread over the
//! compute threads): it loads each input chunk once (a register reads it
//! in place, see [`regs`], unless an output is written into that input's
//! buffer; a view with contiguous rows is read in its buffer too, see
//! [`rows`]), runs every instruction as a short vectorised loop over the
//! chunk (the registers stay in the L1 cache), stores each output chunk once and adds the chunks of reduced
//! values into per-task partial sums. A tensor of one element (a scalar
//! chain) runs on its own loop ([`scalar`]): one dispatch per op over
//! instructions decoded once, with no tensor made between ops.
//!
//! A program of one op per output (each op reading loaded inputs, its
//! result stored in place: `Prepared::one_pass`) keeps no element in its
//! registers when its stores have fresh buffers and its loads read in
//! place: it runs in pieces wider than the L1 cache ([`one_pass_width`]),
//! each paying the body's dispatch once, as an eager op's kernel pays its
//! own (a traced `relu` of 131,072 `f32` on one thread: 20.6-22.7 µs a
//! call in pieces of 1,024, against eager's 15.1; 16.2 now). Its operands
//! may be broadcast (a bias row, a column, a scalar): a splat fills its
//! register once per task, and a gathered row is read in place from the
//! task's repeats of it ([`epilogue`]), so a dense layer's bias add runs
//! in one pass too.
//!
//! A kernel with a reduction over leading axes (a bias gradient) splits
//! its rows among the tasks (blocked, for at most a few thousand outputs:
//! see [`epilogue`]), or else its columns: each task then walks its
//! columns of every row in order (the eager order of the sums), a piece
//! of at least [`COLUMNS`] elements per row. (Narrow column tasks, their
//! rows copied into the registers as tiles, had made a bias gradient's
//! kernel slower than the eager op and reduction it replaces.)
//!
//! An op whose result a store takes writes the output's elements in place
//! of its register's (the register's *target*, see [`regs`]), so a store
//! copies nothing, as a load of an input that nothing writes copies
//! nothing.
//!
//! Each op computes what its eager kernel computes, element by element and
//! in the same type (`f32` ops in `f32`, with the same vectorised `exp`,
//! `sin`, `cos`, `tanh` and `sigmoid`: see [`lanes`]), so a fused graph
//! gives the eager values bit for bit (a sine and a cosine of one value
//! are one [`Instr::Pair`], one range reduction, the same bits; so are a
//! GELU and its derivative, one `erf`); only
//! the fused sums of all elements add in another order (per chunk, in
//! `f32` columns and then in `f64`, see [`sums`]; the chunks in order),
//! which is the one reassociation. Broadcast inputs and partial reductions (bit for bit
//! too) are in [`epilogue`].
//!
//! A pass over a register costs a store and a load per element, which for
//! a cheap op is more than the op: so a sum of a cheap op's result runs in
//! that op's pass ([`Instr::UnarySum`], [`Instr::BinarySum`]), and two
//! arithmetic ops whose intermediate has no other use run as one
//! ([`Instr::Chain`]), each element computed as the separate instructions
//! compute it ([`Program::merge_passes`]).
//!
//! Outputs go to new buffers ([`Program::run`]), or, when the executor
//! hands the kernel inputs that nothing else holds
//! ([`Program::run_in_place`]), into those inputs' buffers: an input of the
//! group's shape that the program loads before it stores an output (so each
//! chunk is read before the same chunk is written) gives that output its
//! buffer. Inputs are read through raw pointers ([`Src`]), never through
//! references, since a buffer may be written while it is read.

use crate::error::{Error, Result};
use crate::kernels::cpu::lockstep::{copy, fill, zip, zip3};
use crate::kernels::cpu::math::with_simd;
use crate::kernels::cpu::workers::{self, SendPtr};
use crate::ops::desc::{Binary, Unary};
use crate::tensor::{alloc, DType, Float, Tensor};

pub(crate) mod chain;
mod compact;
mod cost;
pub(crate) mod cuda;
mod display;
#[allow(missing_docs)] // `pub` items only for the tests (`__internals`), not API
pub(crate) mod epilogue;
mod half;
mod in_place;
pub(crate) mod prepared;
pub(crate) mod regs;
mod rows;
mod scalar;
pub(crate) mod scratch;
#[allow(missing_docs)] // `pub` items only for the tests (`__internals`), not API
pub(crate) mod sums;
pub(crate) use crate::ops::math::table::Pair;
use crate::ops::math::table::{binary, binary_run, unary_one, unary_run};
use epilogue::{combine, gather, periodic, State};
pub(crate) use epilogue::{Axis, Fold};
use in_place::{Donor, Src};
use prepared::Prepared;

/// The element types a fused program runs on: the elementwise table's
/// (`ops::math::table`, which defines each op's function once, for eager
/// kernels and fused ones alike) with the kernel's scratch buffers.
pub trait Lane: crate::ops::math::table::Lane + scratch::Scratch {}
impl<T: crate::ops::math::table::Lane + scratch::Scratch> Lane for T {}
use regs::Regs;
pub(crate) use sums::operands as sums_operands;
use sums::{add_chunk_sums, binary_sum, lanes_total, unary_sum, Lanes};

/// The unit of the chunks: tasks start at multiples of it, and the fused
/// sums add each run of this many elements on their own (see
/// `sums`), so the sums do not depend on the register width.
pub const CHUNK: usize = 256;

/// The most elements a register holds: a chunk of [`CHUNK`]s.
pub const MAX_WIDTH: usize = 4 * CHUNK;
// a register is one run of the table's functions (`table::unary_run`
// splits longer inputs), as the eager maps' blocks are
const _: () = assert!(MAX_WIDTH <= crate::ops::math::table::RUN);

/// Bytes of registers a task aims at (within the L1 cache, with room for
/// the inputs and outputs streaming through).
pub const REG_BYTES: usize = 24 * 1024;

/// Elements per register for a program of `n_regs` registers of `T` over
/// runs of `seg` elements: whole [`CHUNK`]s, as many as fit in
/// [`REG_BYTES`] (at most [`MAX_WIDTH`]), so that the per-chunk costs
/// (dispatch, slice bounds) are paid once per several `CHUNK`s; a shorter
/// run is one register.
pub fn register_width<T>(n_regs: usize, seg: usize) -> usize {
    let fit = REG_BYTES / (n_regs.max(1) * std::mem::size_of::<T>().max(1));
    let width = (fit / CHUNK * CHUNK).clamp(CHUNK, MAX_WIDTH);
    width.min(seg).max(1)
}

/// Elements per register for a run in one pass (see
/// `Prepared::one_pass`): its registers stand for input and output
/// elements and hold none, so they need not fit in the L1 cache; a piece
/// is then as long as a thread's own scratch list keeps registers for
/// (whole [`CHUNK`]s; the vector is sized, never written). Each piece
/// costs the body's dispatch once: at [`register_width`]'s width that was
/// a third of a lone `relu`'s time on 131,072 elements, whose eager
/// kernel has no such cost. The elements each op computes, and so the
/// bits, do not depend on the width (the table's functions take runs of
/// at most `RUN`, from multiples of `CHUNK`, as they do in the eager maps).
pub fn one_pass_width<T>(n_regs: usize, seg: usize) -> usize {
    let slack = 64 / std::mem::size_of::<T>().max(1);
    let fit = (scratch::LOCAL_LEN - slack) / n_regs.max(1);
    (fit / CHUNK * CHUNK)
        .max(register_width::<T>(n_regs, seg))
        .min(seg)
        .max(1)
}

/// The fewest columns a task of a kernel with a reduction over leading
/// axes owns (it runs them in every row, one piece per row: a short
/// piece pays the body's per-instruction dispatch for few elements). Such
/// a kernel has many columns (fewer make it blocked: see `fuse`).
pub(crate) const COLUMNS: usize = 512;

/// A kernel's output tensors (inline up to four: no allocation).
pub type Outs = smallvec::SmallVec<[Tensor; 4]>;

/// Per-input or per-output lists of a run (inline up to eight).
type List<T> = smallvec::SmallVec<[T; 8]>;

/// A register index.
pub(crate) type Reg = u16;

/// One step of a program.
#[derive(Clone, Debug, PartialEq)]
pub enum Instr {
    /// Register `dst` takes the chunk of full-size input `input`.
    Load { dst: Reg, input: u16 },
    /// Register `dst` takes the chunk of input `input` broadcast to the
    /// group: element `j` reads the input's element `(j / q) % p`.
    Gather { dst: Reg, input: u16, q: usize, p: usize },
    /// `dst = op(a)`.
    Unary { op: Unary, dst: Reg, a: Reg },
    /// `x0, x1 = pair.ops()(a)` (the bits of those two ops), their shared
    /// work done once ([`Pair`]: a sine and a cosine from one range
    /// reduction, a GELU and its derivative from one `erf`).
    Pair { pair: Pair, x0: Reg, x1: Reg, a: Reg },
    /// `dst = op(a, b)`.
    Binary { op: Binary, dst: Reg, a: Reg, b: Reg },
    /// Output `out` takes register `src`'s chunk.
    Store { out: u16, src: Reg },
    /// Sum number `acc` adds register `src`'s chunk.
    Accumulate { acc: u16, src: Reg },
    /// `Unary` and the `Accumulate` of its result in one pass (see
    /// [`sums::merge_sums`]): sum number `acc` adds `op(a)`, which `dst`
    /// keeps where a later instruction reads it.
    UnarySum {
        op: Unary,
        dst: Option<Reg>,
        a: Reg,
        acc: u16,
    },
    /// `Binary` and the `Accumulate` of its result in one pass.
    BinarySum {
        op: Binary,
        dst: Option<Reg>,
        a: Reg,
        b: Reg,
        acc: u16,
    },
    /// `dst = op2(op1(a, b), c)` (`op2(c, op1(a, b))` where `swap`): two
    /// arithmetic `Binary`s in one pass (see `chain`).
    Chain {
        op1: Binary,
        op2: Binary,
        swap: bool,
        dst: Reg,
        a: Reg,
        b: Reg,
        c: Reg,
    },
    /// Partial reduction number `out` folds register `src`'s chunk.
    Reduce { out: u16, src: Reg, fold: Fold, axis: Axis },
}

/// What fills a register before the first chunk (it holds one value for
/// the whole run).
#[derive(Clone, Debug, PartialEq)]
pub enum Splat {
    /// The one element of input `input`.
    Input(u16),
    /// A constant.
    Value(f64),
}

/// A fused kernel: its inputs, its register program and its outputs.
#[derive(Clone, Debug, PartialEq)]
pub struct Program {
    /// `F32` or `F64`, or `F16` or `BF16` (computed in `f32` registers,
    /// each op rounded to the half type: see `half`).
    pub dtype: DType,
    /// Elements of the group's shape.
    pub len: usize,
    /// The group's shape (of every elementwise output).
    pub shape: Vec<usize>,
    /// Per input: its number of elements (`len`; one, splatted; or a
    /// broadcast input's, gathered).
    pub input_len: Vec<usize>,
    /// Registers filled once, before the chunks.
    pub splats: Vec<(Reg, Splat)>,
    /// The code run on every chunk.
    pub body: Vec<Instr>,
    /// Registers the program uses.
    pub n_regs: usize,
    /// Per output, in order: what it is.
    pub outputs: Vec<Output>,
    /// The body decoded for one-element runs (see the `scalar` module), made at
    /// the first: `Default::default()`.
    pub scalar: scalar::Decoded,
}

/// One output of a program.
#[derive(Clone, Debug, PartialEq)]
pub enum Output {
    /// An elementwise value (shape `shape`), the next `Store`'s.
    Elementwise,
    /// A sum of all elements (of this shape), the next `Accumulate`'s.
    Sum(Vec<usize>),
    /// A partial reduction (of this shape), the next `Reduce`'s.
    Reduced(Vec<usize>),
}

impl Output {
    pub(crate) fn shape<'a>(&'a self, group: &'a [usize]) -> &'a [usize] {
        match self {
            Output::Elementwise => group,
            Output::Sum(s) | Output::Reduced(s) => s,
        }
    }
}

/// Whether the fused kernel computes this one-input op: whether the
/// elementwise table defines its function.
pub(crate) fn fusible_unary(op: &Unary) -> bool {
    crate::ops::math::table::defined(op)
}

/// Whether the fused kernel computes this two-input op.
pub(crate) fn fusible_binary(op: &Binary) -> bool {
    crate::ops::math::table::defined_binary(op)
}

/// The first `n` elements of `b`'s capacity, as a slice to write (every
/// element written before `set_len`).
fn spare<T: Float>(b: &mut crate::tensor::Buf<T>, n: usize) -> &mut [T] {
    debug_assert!(b.capacity() >= n);
    // SAFETY: `b` holds `n` elements of capacity, and the elements are
    // plain floats (any bits are a value); the caller writes all `n`
    // before `set_len(n)`.
    unsafe { std::slice::from_raw_parts_mut(b.as_mut_ptr(), n) }
}

impl Program {
    /// Merges each sum of a cheap op's result into that op (see
    /// [`sums::merge_sums`]) and pairs of arithmetic ops into one pass
    /// (see [`chain`]); returns how many instructions it merged.
    pub(crate) fn merge_passes(&mut self) -> usize {
        sums::merge_sums(&mut self.body) + chain::merge_chains(&mut self.body)
    }

    /// Runs the program on `inputs`; returns its outputs in order.
    pub fn run(&self, inputs: &[Tensor]) -> Result<Outs> {
        self.check_inputs(inputs)?;
        match self.dtype {
            DType::F32 => self.run_typed::<f32>(self.prepared(&mut None), inputs, &[]),
            DType::F64 => self.run_typed::<f64>(self.prepared(&mut None), inputs, &[]),
            DType::F16 => self.run_half::<crate::tensor::f16>(inputs),
            DType::BF16 => self.run_half::<crate::tensor::bf16>(inputs),
            d => Err(Error::invalid("Fused", format!("no fused kernel for {d}"))),
        }
    }

    fn check_inputs(&self, inputs: &[Tensor]) -> Result<()> {
        if inputs.len() != self.input_len.len() {
            return Err(Error::invalid(
                "Fused",
                format!("expects {} inputs, got {}", self.input_len.len(), inputs.len()),
            ));
        }
        for (i, t, &want) in zip3(0.., inputs, &self.input_len) {
            if t.dtype() != self.dtype || t.numel() != want {
                return Err(Error::invalid(
                    "Fused",
                    format!(
                        "input {i} is {} {:?}; the kernel was planned for {} of {want} elements (group shape {:?})",
                        t.dtype(),
                        t.shape(),
                        self.dtype,
                        self.shape
                    ),
                ));
            }
        }
        Ok(())
    }

    fn run_typed<T: Lane>(&self, plan: &Prepared, inputs: &[Tensor], donors: &[Donor<T>]) -> Result<Outs> {
        if self.len == 1 && !plan.partial {
            return self.run_one::<T>(inputs);
        }
        // a donor's elements are read through its pointer only (the kernel
        // writes them): no reference to them is made while it runs
        let donor_of_input = |i: usize| donors.iter().find(|d| d.input == i);
        // (a view with contiguous rows as its whole buffer: see `rows`;
        // pushed one by one, not collected through a `Result`, which
        // moved the whole inline list once more)
        let mut data: List<Option<rows::Read<'_, T>>> = List::new();
        for (i, t) in inputs.iter().enumerate() {
            data.push(match donor_of_input(i) {
                Some(_) => None,
                None => Some(self.read_as::<T>(plan.loads_only[i], t)?),
            });
        }
        let mut srcs: List<Src<'_, T>> = List::new();
        for (i, d) in data.iter().enumerate() {
            srcs.push(match (d, donor_of_input(i)) {
                (Some((d, rows)), _) => Src {
                    ptr: d.as_ptr(),
                    len: d.len(),
                    fixed: true,
                    rows: rows.as_ref(),
                },
                (None, Some(dn)) => Src {
                    ptr: dn.ptr.get() as *const T,
                    len: self.len,
                    fixed: dn.fixed,
                    rows: None,
                },
                (None, None) => unreachable!("an input without elements has a donor"),
            });
        }
        let n_sums = plan.n_sums;
        // elementwise outputs of `len`, and partial reductions
        let mut ebufs: List<_> = List::new();
        let mut rbufs: List<_> = List::new();
        for o in self.outputs.iter() {
            match o {
                Output::Elementwise => {
                    // a new buffer, or the donor's
                    let k = ebufs.len();
                    ebufs.push(match donors.iter().any(|d| d.out == k) {
                        true => None,
                        false => Some(alloc::try_buf::<T>("Fused", self.len)?),
                    })
                }
                Output::Reduced(shape) => {
                    let n = shape.iter().product();
                    rbufs.push((alloc::try_buf::<T>("Fused", n)?, n));
                }
                Output::Sum(_) => {}
            }
        }
        // (pointers taken once the buffers are in place: a small buffer's
        // elements live inside it, and move with it)
        let outs: List<SendPtr<T>> = ebufs
            .iter_mut()
            .enumerate()
            .map(|(k, b)| match b {
                Some(b) => SendPtr(b.as_mut_ptr()),
                None => {
                    donors
                        .iter()
                        .find(|d| d.out == k)
                        .expect("a store without a buffer has a donor")
                        .ptr
                }
            })
            .collect();
        let parts: List<SendPtr<T>> = rbufs.iter_mut().map(|b| SendPtr(b.0.as_mut_ptr())).collect();
        // the stores written in place: their output's buffer is fresh
        let direct: smallvec::SmallVec<[(Reg, u16); 4]> = (plan.direct.iter())
            .filter(|(_, out)| ebufs[*out as usize].is_some())
            .copied()
            .collect();
        let direct = &direct[..];
        let (outs, parts) = (&outs[..], &parts[..]);
        let (rows, cols, unit) = plan.layout;
        type Partials = smallvec::SmallVec<[Option<Vec<f64>>; 2]>;
        let task = |c: std::ops::Range<usize>| -> (smallvec::SmallVec<[f64; 2]>, Partials) {
            let mut sums: smallvec::SmallVec<[Lanes; 2]> = smallvec::smallvec![[0.0; 8]; n_sums];
            // SAFETY (of `outs`, `parts`): each task writes its own
            // elements of every output buffer, which holds its length of
            // capacity.
            // (inlined into `with_simd`'s wide-vector function, so that the
            // op loops are compiled for AVX2 or AVX-512)
            let blocked = with_simd(
                #[inline(always)]
                || self.run_task::<T>(plan, &srcs, (outs, direct), parts, &mut sums, c),
            );
            (sums.iter().map(lanes_total).collect(), blocked)
        };
        let min_task = plan.min_task;
        let parallel = self.len >= 2 * min_task && workers::threads() > 1;
        // (a run of one task, most small kernels', in a list of one: no
        // list of sixteen tasks' results made and moved; the tasks' list
        // inline as it was, with no allocation)
        type Results = (smallvec::SmallVec<[f64; 2]>, Partials);
        let (mut many, mut one): (smallvec::SmallVec<[Results; 16]>, [Results; 1]);
        let partials: &mut [Results] = if parallel && rows > 1 && cols >= 2 * COLUMNS {
            // columns (of every row): as many tasks as hold `COLUMNS`
            // and `min_task` elements each, their bounds on
            // multiples of 16 (a cache line of `f32`)
            let n_tasks = (cols / COLUMNS)
                .min(self.len / min_task)
                .clamp(1, workers::threads() * 4);
            let bound = |t: usize| {
                if t == n_tasks {
                    cols
                } else {
                    t * cols / n_tasks / 16 * 16
                }
            };
            many = workers::map_small(n_tasks, |t| task(bound(t)..bound(t + 1)));
            &mut many[..]
        } else if parallel && rows == 1 && cols > unit {
            let per = (cols / (workers::threads() * 4)).max(min_task).next_multiple_of(unit);
            let n_tasks = cols.div_ceil(per);
            many = workers::map_small(n_tasks, |t| task(t * per..((t + 1) * per).min(cols)));
            &mut many[..]
        } else {
            one = [task(0..cols)];
            &mut one[..]
        };
        // blocked reductions: the tasks' partial results, in order
        for (k, (b, n)) in zip(0.., &mut rbufs[..]) {
            let from: smallvec::SmallVec<[&[f64]; 16]> = partials.iter().filter_map(|(_, p)| p[k].as_deref()).collect();
            if !from.is_empty() {
                combine(plan.reduces[k].0, &from, &mut spare(b, *n)[..]);
            }
        }
        // the partial results' vectors go back to the free list
        for (_, p) in partials.iter_mut() {
            for v in p.iter_mut() {
                if let Some(v) = v.take() {
                    scratch::give(v);
                }
            }
        }
        // (drained in place: an iterator by value moved each inline list
        // whole, a copy of hundreds of bytes per run)
        let mut ebufs = ebufs.drain(..).enumerate();
        let mut rbufs = rbufs.drain(..);
        let mut acc = 0;
        let mut results = Outs::new();
        for o in self.outputs.iter() {
            let b = match o {
                Output::Elementwise => match ebufs.next() {
                    Some((_, Some(mut b))) => {
                        // SAFETY: the tasks wrote every element of the
                        // buffer (each its range).
                        unsafe { b.set_len(self.len) };
                        b
                    }
                    Some((k, None)) => {
                        // written into the donor input's buffer
                        let d = donors
                            .iter()
                            .find(|d| d.out == k)
                            .expect("a store without a buffer has a donor");
                        results.push(inputs[d.input].clone());
                        continue;
                    }
                    None => unreachable!("one buffer per elementwise output"),
                },
                Output::Reduced(_) => {
                    let (mut b, n) = rbufs.next().expect("one buffer per partial reduction");
                    // SAFETY: the tasks wrote every element of the buffer
                    // (their rows or columns).
                    unsafe { b.set_len(n) };
                    b
                }
                Output::Sum(_) => {
                    let total: f64 = partials.iter().map(|p| p.0[acc]).sum();
                    acc += 1;
                    let mut b = crate::tensor::Buf::<T>::new();
                    b.push(T::from_f64(total));
                    b
                }
            };
            results.push(Tensor::from_storage(T::buf_into_storage(b), o.shape(&self.shape)));
        }
        Ok(results)
    }

    /// [`run_typed`](Self::run_typed) for one element.
    fn run_one<T: Lane>(&self, inputs: &[Tensor]) -> Result<Outs> {
        let data: smallvec::SmallVec<[std::borrow::Cow<'_, [T]>; 4]> =
            inputs.iter().map(|t| t.values::<T>("Fused")).collect::<Result<_>>()?;
        let srcs: smallvec::SmallVec<[&[T]; 4]> = data.iter().map(|d| &d[..]).collect();
        let mut vals: smallvec::SmallVec<[T; 4]> = smallvec::smallvec![T::zero(); self.outputs.len()];
        let mut sums: smallvec::SmallVec<[f64; 2]> = smallvec::smallvec![0.0; self.outputs.len()];
        // (see `scalar`)
        self.run_scalar::<T>(&srcs, &mut vals, &mut sums);
        let (mut v, mut s) = (vals.into_iter(), sums.into_iter());
        Ok(self
            .outputs
            .iter()
            .map(|o| {
                let x = match o {
                    Output::Sum(_) => T::from_f64(s.next().unwrap_or(0.0)),
                    // (a partial reduction has more than one element: never here)
                    _ => v.next().unwrap_or(T::zero()),
                };
                let mut b = crate::tensor::Buf::<T>::new();
                b.push(x);
                Tensor::from_storage(T::buf_into_storage(b), o.shape(&self.shape))
            })
            .collect())
    }

    /// Runs the program over the columns `c` of every row of the group
    /// viewed as `rows x cols` (the call plan's `layout`), writing
    /// the outputs' elements there (the `direct` stores' registers
    /// written there) and adding to `sums`.
    /// Returns the partial results of its blocked reductions.
    #[inline(always)]
    fn run_task<T: Lane>(
        &self,
        plan: &Prepared,
        srcs: &[Src<'_, T>],
        (outs, direct): (&[SendPtr<T>], &[(Reg, u16)]),
        parts: &[SendPtr<T>],
        sums: &mut [Lanes],
        c: std::ops::Range<usize>,
    ) -> smallvec::SmallVec<[Option<Vec<f64>>; 2]> {
        let (rows, cols, _) = plan.layout;
        // whole rows are one run of elements
        let whole = rows == 1 || c.len() == cols;
        let (first, seg, n_segs) = if rows == 1 {
            (c.start, c.len(), 1)
        } else if whole {
            (0, rows * cols, 1)
        } else {
            (c.start, c.len(), rows)
        };
        // (one pass: every store in place and every load read in place,
        // so the registers hold no element: see `Prepared::one_pass`)
        let one_pass =
            plan.one_pass && direct.len() == plan.direct.len() && srcs.iter().all(|s| s.fixed && s.rows.is_none());
        let stride = match one_pass {
            true => one_pass_width::<T>(self.n_regs, seg),
            false => register_width::<T>(self.n_regs, seg),
        };
        // (with a cache line of slack, so that the registers start on a
        // line: wide loads and stores across two lines made the register
        // passes about a tenth slower)
        let len = self.n_regs.max(1) * stride;
        let slack = 64 / std::mem::size_of::<T>();
        let mut store = scratch::take_written(len + slack, T::zero());
        let at = store.as_ptr().align_offset(64).min(slack);
        let mut regs = Regs::new(&mut store[at..at + len], stride);
        for (r, s) in self.splats.iter() {
            let v = match s {
                Splat::Input(i) => srcs[*i as usize].first(),
                Splat::Value(v) => T::from_f64(*v),
            };
            fill(regs.get_mut(*r, stride), v);
        }
        // (both lists filled where they stand, and only when the program
        // has such instructions: a list collected and returned is moved
        // whole, its inline room included, which for the repeats' list
        // was a copy of 320 bytes per run and a stall on reading it back)
        let mut states: smallvec::SmallVec<[State<T>; 2]> = smallvec::SmallVec::new();
        if !plan.reduces.is_empty() {
            states
                .extend((plan.reduces.iter()).map(|&(fold, axis)| State::new(fold, axis, c.clone(), c.len() == cols)));
        }
        // per gather instruction (by its index in the body), its broadcast
        // input's repeats (see `periodic`); only gathers have an entry, so
        // that a long body allocates no list at each task
        let mut repeats: List<(usize, Vec<T>, usize)> = List::new();
        if !plan.gathers.is_empty() {
            repeats.extend((plan.gathers.iter()).filter_map(|&(k, input, q, p)| {
                // SAFETY: as for `Instr::Gather` below
                periodic(unsafe { srcs[input as usize].as_slice() }, q, p, stride).map(|(v, period)| (k, v, period))
            }));
        }
        // (the body inline here: registers and sums stay locals, which the
        // compiler keeps in registers across the output writes)
        let (mut s, mut off) = (0, 0);
        while s < n_segs {
            // the next piece: up to a register's width of a segment
            let n = stride.min(seg - off);
            let start = first + s * cols + off;
            off += n;
            if off >= seg {
                (s, off) = (s + 1, 0);
            }
            for &(r, out) in direct {
                // SAFETY: elements `start..start + n` of a fresh output
                // buffer (of `len` elements) are this task's, outside the
                // registers and every input, and only this register
                // writes them until its store (which untargets it); every
                // access to it meanwhile is of `n` elements.
                unsafe { regs.target(r, outs[out as usize].get().add(start), n) }
            }
            for (k, ins) in zip(0.., &self.body[..]) {
                match *ins {
                    Instr::Load { dst, input } => {
                        let src = &srcs[input as usize];
                        if let Some(rows) = &src.rows {
                            // SAFETY: `src` is a view's whole buffer, which
                            // lives through the run, and which no output
                            // writes (a donor is no view)
                            unsafe { rows.load(src.ptr, &mut regs, dst, start, n) }
                        } else if src.fixed {
                            // read in place: SAFETY: the input's elements
                            // live through the run, and no output writes
                            // them while this register stands for them
                            // (`fixed`)
                            unsafe { regs.view(dst, src.at(start, n), n) }
                        } else {
                            src.copy_to(start, regs.get_mut(dst, n));
                        }
                    }
                    Instr::Gather { dst, input, q, p } => match repeats.iter().find(|r| r.0 == k) {
                        // SAFETY: `n <= stride` repeats from `start % period`
                        // lie in the task's repeats, which nothing writes
                        // and which live through the task.
                        Some((_, v, period)) => unsafe { regs.view(dst, v.as_ptr().add(start % period), n) },
                        None => {
                            // SAFETY: a broadcast input gives no output its
                            // buffer (`donors` takes only inputs read by a
                            // `Load`), so nothing writes it during the run.
                            let src = unsafe { srcs[input as usize].as_slice() };
                            let at = start % p;
                            if q == 1 && at + n <= p {
                                // a piece of one long row: read in place
                                // (SAFETY: as above; `at + n <= p` elements)
                                unsafe { regs.view(dst, src.as_ptr().add(at), n) }
                            } else {
                                gather(src, q, p, start, regs.get_mut(dst, n))
                            }
                        }
                    },
                    Instr::Unary { ref op, dst, a } => {
                        let (d, x, _) = regs.split(dst, a, a, n);
                        unary_run(op, x, d);
                    }
                    Instr::Pair { pair, x0, x1, a } => {
                        let (y0, y1, x) = regs.split2(x0, x1, a, n);
                        pair.run(x, y0, y1);
                    }
                    Instr::Binary { ref op, dst, a, b } => {
                        let (d, x, y) = regs.split(dst, a, b, n);
                        binary_run(op, x, y, d);
                    }
                    Instr::Store { out, src } => {
                        // (written there already: nothing to copy)
                        // SAFETY: `start..start + n` lies in this task's
                        // elements of an output buffer of `len` elements.
                        let o = unsafe { outs[out as usize].get().add(start) };
                        let there = regs.is_at(src, o);
                        regs.untarget(src);
                        if !there {
                            // SAFETY: as above; the register is another
                            // allocation, or an input's elements that no
                            // output writes.
                            copy(unsafe { std::slice::from_raw_parts_mut(o, n) }, regs.get(src, n));
                        }
                    }
                    Instr::Accumulate { acc, src } => {
                        add_chunk_sums(regs.get(src, n), &mut sums[acc as usize]);
                    }
                    Instr::UnarySum { ref op, dst, a, acc } => {
                        let sum = &mut sums[acc as usize];
                        match dst {
                            Some(d) => {
                                let (d, x, _) = regs.split(d, a, a, n);
                                unary_sum(op, x, Some(d), sum)
                            }
                            None => unary_sum(op, regs.get(a, n), None, sum),
                        }
                    }
                    Instr::BinarySum { ref op, dst, a, b, acc } => {
                        let sum = &mut sums[acc as usize];
                        match dst {
                            Some(d) => {
                                let (d, x, y) = regs.split(d, a, b, n);
                                binary_sum(op, x, y, Some(d), sum)
                            }
                            None => binary_sum(op, regs.get(a, n), regs.get(b, n), None, sum),
                        }
                    }
                    Instr::Chain {
                        ref op1,
                        ref op2,
                        swap,
                        dst,
                        a,
                        b,
                        c,
                    } => chain::run(op1, op2, swap, &mut regs, dst, a, b, c, n),
                    Instr::Reduce { out, src, .. } => {
                        states[out as usize].feed(start, regs.get(src, n), parts[out as usize].get());
                    }
                }
            }
        }
        scratch::give(store);
        repeats.drain(..).for_each(|(_, v, _)| scratch::give(v));
        states
            .drain(..)
            .zip(parts)
            .map(|(st, out)| st.finish(out.get()))
            .collect()
    }
}
