//! Traced graph functions, after `tf.function`: trace a closure once, run
//! it as a graph many times.
//!
//! **What a trace is.** [`function`] wraps a closure over tensors and
//! variables. On the first call with a given *input signature* (the dtype
//! and shape of each tensor argument, and which variables are passed), the
//! closure runs once, eagerly, on the call's own arguments, while every op
//! it runs is recorded into a [`Graph`]: a listing of nodes (op descriptor,
//! input values, output values) that can be printed, optimised
//! (dead-code and common-subexpression elimination) and run again. Later
//! calls with the same signature run the graph; the closure is not called.
//!
//! **When it retraces.** A call whose tensors differ in dtype or shape from
//! every cached trace, that passes other variables, or whose arguments have
//! another structure (an `Option` that is `None` where it was `Some`, a
//! `Vec` of another length: see [`Leaf::Tag`]) traces again
//! ([`Function::trace_count`] counts them; the cache keeps the
//! [`FunctionOptions::max_cached`] most recently used graphs). To prevent a
//! retracing storm give an [`input_signature`](FunctionOptions::input_signature)
//! with `None` for dims that vary: calls that do not fit are errors, and
//! one graph serves every call that fits unless its numbers depend on the
//! sizes of those dims. A call at a size not seen before is traced as a
//! check, and runs a graph already made only if its trace is that graph; a
//! graph with a number derived from the sizes (a mean's count, a reshape
//! or broadcast target, a constant of that size) is made once per size
//! instead, never run with another size's numbers.
//! [`FunctionOptions::max_traces`] turns a storm into an error too.
//! A call that passes one tensor as two arguments (`(x, x)`) is traced
//! apart from calls with two tensors, and inside its trace the two are one
//! tensor, as they are eagerly: a tape inside the closure that watches
//! either gets the total derivative (`tf.function` would give each
//! argument a placeholder of its own and answer a partial one).
//!
//! **What a function captures.** Rust code in the closure runs only while
//! tracing: a `println!`, a Rust `if` on a shape, a loop count, are fixed
//! in the graph (use [`cond`] and [`while_loop`] for decisions on tensor
//! values). Tensors the closure uses without receiving them (a captured
//! weight matrix, a constant made inside) are frozen into the graph as
//! constants. **Variables are captured by reference**: each run reads a
//! variable's value at that point of the graph, and writes (`assign`,
//! `assign_sub`, `apply_gradient_descent`, an optimizer's
//! `apply_gradients` or `minimize`, which is one `ApplyUpdates` node) happen
//! at each run, in program order. While tracing, writes are not applied (the trace keeps
//! the new value for later reads in the same trace), so the first call
//! changes a variable exactly once, like every later one.
//!
//! **Variables made inside.** A variable the closure makes while it is
//! traced lives on in the graph, from call to call. That is what a layer
//! built at its first call, or an optimizer making its slots at its first
//! step, wants; a closure that makes a fresh variable at every run (as
//! eager code that starts each call from `Variable::new`) would instead
//! carry state from one call to the next that its eager runs never had.
//! So, as TensorFlow's `tf.function` does, a trace that makes variables is
//! traced once more: the second trace must make none (the first one's are
//! reused), else the call is an error. Make such variables outside the
//! closure, or once:
//!
//! ```
//! use std::sync::OnceLock;
//! use gradtape::{function, Tensor, Variable};
//!
//! let fresh = function(|x: &Tensor| {
//!     let v = Variable::new(x.clone()); // a new variable at every trace
//!     v.assign_add(x)?;
//!     Ok(v.read())
//! });
//! assert!(fresh.call(&Tensor::vector(&[1.0f32])).is_err());
//!
//! let total: OnceLock<Variable> = OnceLock::new();
//! let once = function(move |x: &Tensor| {
//!     let v = total.get_or_init(|| Variable::new(Tensor::zeros(x.shape(), x.dtype())));
//!     v.assign_add(x)?;
//!     Ok(v.read())
//! });
//! assert_eq!(once.call(&Tensor::vector(&[1.0f32]))?.to_vec::<f32>()?, [1.0]);
//! assert_eq!(once.call(&Tensor::vector(&[2.0f32]))?.to_vec::<f32>()?, [3.0]);
//! # Ok::<(), gradtape::Error>(())
//! ```
//!
//! **Gradients.** A [`GradientTape`](crate::GradientTape) used inside the
//! closure is traced too: its backward pass becomes graph nodes, so a
//! training step (tape, loss, gradient, optimizer update) is one graph.
//! [`gradients`] differentiates between traced values (TensorFlow's
//! `tf.gradients`). A function called while a tape or a forward accumulator
//! is active is recorded there as one op, whose gradient is the function's
//! symbolic gradient, itself a traced function (built once): nested tapes,
//! `jacobian` and `hessian` work through calls.
//!
//! **Batching.** [`vmap`](vmap()) runs a closure written for one example
//! over a batch: it traces the closure at one example's shapes and
//! evaluates that graph on the whole batch with per-op batching rules (see
//! the [`vmap`](mod@vmap) module).
//!
//! ```
//! use gradtape::{function, GradientTape, Tensor, Variable};
//!
//! let w = Variable::new(Tensor::vector(&[1.0f32, -2.0]));
//! // one SGD step on a least-squares loss, as one graph
//! let step = function(move |(x, y): &(Tensor, Tensor)| {
//!     let tape = GradientTape::new();
//!     let loss = tape.record(|| x.mul(&w.read())?.sum(&[1], false)?.sub(y)?.square()?.mean_all())?;
//!     let g = tape.gradient(&loss, &w)?.unwrap();
//!     w.apply_gradient_descent(0.1, &g)?;
//!     Ok(loss)
//! });
//! let x = Tensor::from_vec(vec![1.0f32, 0.0, 0.0, 1.0], &[2, 2])?;
//! let y = Tensor::vector(&[3.0f32, 4.0]);
//! let first = step.call(&(x.clone(), y.clone()))?.to_scalar::<f32>()?;
//! let second = step.call(&(x, y))?.to_scalar::<f32>()?;
//! assert!(second < first);
//! assert_eq!(step.trace_count(), 1);
//! # Ok::<(), gradtape::Error>(())
//! ```

mod check;
pub mod compile;
mod concrete;
pub(crate) mod control;
mod func;
mod grad;
pub(crate) mod graph;
pub(crate) mod jacobian;
pub(crate) mod passes;
mod rngs;
mod shared_args;
pub(crate) mod sizes;
mod structure;
pub(crate) mod trace;
pub(crate) mod variables;
pub(crate) mod verify;
pub mod vmap;

pub use check::{check_traced, TracedCheckOptions, TracedCheckReport};
pub use compile::{CompileOptions, CompileStats};
pub use concrete::ConcreteFunction;
pub use control::{cond, while_loop, WhileOptions};
pub use func::{function, Function, FunctionOptions, TensorSpec};
pub use grad::{gradients, GradientsOptions};
pub use graph::{Graph, Node, Site, ValueId, ValueInfo};
pub use structure::{Leaf, TensorStruct};
pub use vmap::{vmap, vmap_fallbacks, Vmap, VmapFallback};
