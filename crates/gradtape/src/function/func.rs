//! [`Function`]: a closure traced once per input signature, then run as a
//! graph.

use std::sync::{Arc, Mutex};

use super::compile::CompileOptions;
use super::concrete::{ConcreteFunction, FlatFn};
use super::graph::{Changed, Graph};
use super::shared_args;
use super::sizes;
use super::structure::{reuse_leaves, tensors_of, Leaf, TensorStruct};
use super::trace;
use crate::autodiff::variable::Variable;
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor, TensorId};

/// The dtype and shape a function accepts for one tensor argument; `None`
/// dims accept any size (TensorFlow's `tf.TensorSpec`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorSpec {
    /// The element type.
    pub dtype: DType,
    /// The dims; `None` for a dim of any size.
    pub shape: Vec<Option<usize>>,
}

impl TensorSpec {
    /// A spec of this dtype and shape (`None` dims: any size).
    ///
    /// ```
    /// use gradtape::{DType, TensorSpec};
    /// let batch_of_rows = TensorSpec::new(DType::F32, &[None, Some(784)]);
    /// assert_eq!(batch_of_rows.shape.len(), 2);
    /// ```
    pub fn new(dtype: DType, shape: &[Option<usize>]) -> Self {
        TensorSpec {
            dtype,
            shape: shape.to_vec(),
        }
    }

    /// The exact spec of a tensor.
    pub fn of(t: &Tensor) -> Self {
        TensorSpec {
            dtype: t.dtype(),
            shape: t.shape().iter().map(|&d| Some(d)).collect(),
        }
    }

    /// Whether `t` fits the spec.
    pub fn accepts(&self, t: &Tensor) -> bool {
        t.dtype() == self.dtype
            && t.rank() == self.shape.len()
            && t.shape()
                .iter()
                .zip(&self.shape)
                .all(|(&d, s)| s.is_none_or(|s| s == d))
    }
}

/// The cache key of one argument.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum LeafKey {
    Tensor(TensorSpec),
    Variable(TensorId),
    /// a structure tag ([`Leaf::Tag`])
    Tag(u64),
}

/// Settings of a [`Function`].
#[derive(Clone, Debug)]
pub struct FunctionOptions {
    /// The name shown in listings and errors.
    pub name: String,
    /// How many traced graphs are kept (least recently used go first).
    pub max_cached: usize,
    /// Tracing more often than this is an error (a retracing storm).
    pub max_traces: Option<usize>,
    /// A fixed signature: a call that does not fit it is an error (never a
    /// retrace). Where it has `None` dims, a call at a size not seen before
    /// is traced as a check (see the [`function`](mod@crate::function)
    /// module): a graph already made that the check reproduces serves it,
    /// so one graph serves every size of a function whose numbers do not
    /// depend on those sizes; one whose numbers do (a mean divides by the
    /// count, a reshape target read from a shape) gets a graph per size, so
    /// no call gets another size's numbers.
    pub input_signature: Option<Vec<TensorSpec>>,
    /// Whether traced graphs go through the compiler (constant folding,
    /// simplification, fusion; see the `compile` module) before they run.
    /// On by default; `GRADTAPE_GRAPH_OPT=0` turns it off everywhere.
    pub optimize: bool,
    /// Which of the compiler's passes run, and whether the graph is checked
    /// after each (see [`CompileOptions`]; also for the function's symbolic
    /// gradients, not for the branches and bodies of its control flow).
    pub compile: CompileOptions,
}

impl Default for FunctionOptions {
    fn default() -> Self {
        FunctionOptions {
            name: "function".into(),
            max_cached: 8,
            max_traces: None,
            input_signature: None,
            optimize: true,
            compile: CompileOptions::default(),
        }
    }
}

impl FunctionOptions {
    /// These options with the compiler pass `name` off (see
    /// [`CompileOptions::pass_names`]); an unknown name is an error that
    /// lists the known ones.
    ///
    /// ```
    /// use gradtape::{Function, FunctionOptions, Tensor};
    /// let opts = FunctionOptions::default().disable_pass("fold")?;
    /// let f = Function::with_options(|x: &Tensor| x.add(&Tensor::scalar(1.0f32).exp()?), opts);
    /// let c = f.concrete(&Tensor::vector(&[0.5f32]))?;
    /// assert_eq!(c.compile_stats().folded, 0); // exp(1) is not folded
    /// assert!(FunctionOptions::default().disable_pass("folding").is_err());
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn disable_pass(mut self, name: &str) -> Result<Self> {
        self.compile = self.compile.disable_pass(name)?;
        Ok(self)
    }
}

struct Entry<O> {
    /// the calls it may serve: the traced dtypes and shapes, or the
    /// signature's (with `None` dims)
    key: Vec<LeafKey>,
    /// for a key with `None` dims, the exact keys (sizes) checked to trace
    /// to this graph, most recently used last; the calls it serves
    sizes: Vec<Vec<LeafKey>>,
    /// the tensor arguments that repeat an earlier one (see
    /// [`shared_args`]): part of the key
    repeats: Vec<(u32, u32)>,
    /// the trace as recorded, to compare other sizes' traces with
    traced: Option<Traced>,
    concrete: Arc<ConcreteFunction>,
    template: Arc<O>,
}

/// What a trace at another size must match (see [`sizes`](super::sizes)).
struct Traced {
    graph: Graph,
    captures: Vec<TensorId>,
    variables: Vec<TensorId>,
}

impl<O> Entry<O> {
    /// Whether the entry serves these leaves (whose repeated tensors are
    /// `repeats`) without a new trace.
    fn serves(&self, leaves: &[Leaf<'_>], repeats: &[(u32, u32)]) -> bool {
        self.repeats == repeats
            && fits(&self.key, leaves)
            && (self.traced.is_none() || self.sizes.iter().any(|k| fits(k, leaves)))
    }
}

/// How many sizes an entry of a signature with `None` dims remembers.
const MAX_SIZES: usize = 64;

struct Cache<O> {
    /// most recently used last
    entries: Vec<Entry<O>>,
    traces: usize,
}

/// A closure traced into a graph on its first call with each input
/// signature and run as that graph afterwards; see the [module
/// docs](mod@crate::function).
///
/// ```
/// use gradtape::{function, Tensor};
/// let f = function(|x: &Tensor| x.mul(x)?.add_scalar(1.0));
/// let y = f.call(&Tensor::vector(&[1.0f32, 2.0]))?;
/// assert_eq!(y.to_vec::<f32>()?, vec![2.0, 5.0]);
/// f.call(&Tensor::vector(&[3.0f32, 4.0]))?; // same signature: no new trace
/// assert_eq!(f.trace_count(), 1);
/// f.call(&Tensor::vector(&[3.0f64]))?; // another dtype and shape: a new trace
/// assert_eq!(f.trace_count(), 2);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub struct Function<I, O, F> {
    f: Arc<F>,
    options: FunctionOptions,
    cache: Mutex<Cache<O>>,
    _input: std::marker::PhantomData<fn(&I)>,
}

/// The vectors of a call: its arguments' leaves, the graph's inputs and
/// its outputs (empty between calls), kept per thread for the next call
/// of any function (see [`CALL_VECS`]).
#[derive(Default)]
struct CallVecs {
    leaves: Vec<Leaf<'static>>,
    inputs: Vec<Tensor>,
    outputs: Vec<Tensor>,
}

thread_local! {
    /// This thread's [`CallVecs`], taken by a call and put back, emptied,
    /// when it ends; a call that finds none (one nested in another: a
    /// function traced or run inside another's call) makes its own. (A
    /// lock on each function's vectors cost two atomic operations per
    /// call, a tenth of a small traced call's fixed cost.)
    static CALL_VECS: std::cell::Cell<Option<CallVecs>> = const { std::cell::Cell::new(None) };
}

/// Makes a [`Function`] of a closure over a [`TensorStruct`] of tensors and
/// variables (a `&Tensor`, a tuple, a `Vec`, a struct of your own) that
/// returns a [`TensorStruct`].
pub fn function<I, O, F>(f: F) -> Function<I, O, F>
where
    I: TensorStruct + Send + Sync + 'static,
    O: TensorStruct + Send + Sync + 'static,
    F: Fn(&I) -> Result<O> + Send + Sync + 'static,
{
    Function::with_options(f, FunctionOptions::default())
}

impl<I, O, F> Function<I, O, F>
where
    I: TensorStruct + Send + Sync + 'static,
    O: TensorStruct + Send + Sync + 'static,
    F: Fn(&I) -> Result<O> + Send + Sync + 'static,
{
    /// A function with settings of its own.
    ///
    /// ```
    /// use gradtape::{DType, Function, FunctionOptions, Tensor, TensorSpec};
    /// let opts = FunctionOptions {
    ///     input_signature: Some(vec![TensorSpec::new(DType::F32, &[None])]),
    ///     ..Default::default()
    /// };
    /// let f = Function::with_options(|x: &Tensor| x.exp(), opts);
    /// f.call(&Tensor::vector(&[0.0f32]))?;
    /// f.call(&Tensor::vector(&[0.0f32, 1.0, 2.0]))?; // any length: the same trace
    /// assert_eq!(f.trace_count(), 1);
    /// assert!(f.call(&Tensor::vector(&[0.0f64])).is_err()); // does not fit
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn with_options(f: F, options: FunctionOptions) -> Self {
        Function {
            f: Arc::new(f),
            options,
            cache: Mutex::new(Cache {
                entries: Vec::new(),
                traces: 0,
            }),
            _input: std::marker::PhantomData,
        }
    }

    /// How many times the closure has been traced.
    ///
    /// With a signature that has `None` dims, a call at a size not seen
    /// before traces the closure to check that it gives a graph already
    /// made (see [`FunctionOptions::input_signature`]); such a check is not
    /// counted, only traces that make a new graph.
    pub fn trace_count(&self) -> usize {
        self.lock().traces
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cache<O>> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The cache key of a call, checked against the input signature.
    fn key(&self, leaves: &[Leaf<'_>]) -> Result<Vec<LeafKey>> {
        let name = &self.options.name;
        let Some(sig) = &self.options.input_signature else {
            return Ok(exact_key(leaves));
        };
        let n_tensors = leaves.iter().filter(|l| matches!(l, Leaf::Tensor(_))).count();
        if n_tensors != sig.len() {
            return Err(Error::invalid(
                "function",
                format!("'{name}' takes {} tensors by its signature, got {n_tensors}", sig.len()),
            ));
        }
        let mut specs = sig.iter();
        let mut key = Vec::with_capacity(leaves.len());
        for (i, l) in leaves.iter().enumerate() {
            key.push(match l {
                Leaf::Tensor(t) => {
                    let spec = specs.next().expect("counted");
                    if !spec.accepts(t) {
                        return Err(Error::invalid(
                            "function",
                            format!(
                                "'{name}': argument {i} ({} {:?}) does not fit the signature ({} {:?})",
                                t.dtype(),
                                t.shape(),
                                spec.dtype,
                                spec.shape
                            ),
                        ));
                    }
                    LeafKey::Tensor(spec.clone())
                }
                Leaf::Variable(v) => LeafKey::Variable(v.handle()),
                Leaf::Tag(t) => LeafKey::Tag(*t),
            });
        }
        Ok(key)
    }

    /// The concrete function for these arguments (traced if needed) and
    /// the structure of its outputs.
    fn lookup(&self, args: &I) -> Result<(Arc<ConcreteFunction>, Arc<O>)> {
        let mut leaves = Vec::new();
        args.leaves(&mut leaves);
        self.lookup_leaves(args, &leaves)
    }

    /// [`lookup`](Self::lookup) given the arguments' leaves. A cached
    /// graph is found without making its key (no allocation).
    fn lookup_leaves(&self, args: &I, leaves: &[Leaf<'_>]) -> Result<(Arc<ConcreteFunction>, Arc<O>)> {
        let repeats = shared_args::repeats(leaves);
        {
            let mut cache = self.lock();
            // (most recently used last: the last call's entry is looked at
            // first, and stays in place)
            let n = cache.entries.len();
            if let Some(i) = cache.entries.iter().rposition(|e| e.serves(leaves, &repeats)) {
                if i + 1 < n {
                    let e = cache.entries.remove(i);
                    cache.entries.push(e);
                }
                let e = &cache.entries[n - 1];
                return Ok((e.concrete.clone(), e.template.clone()));
            }
        }
        // (fails for calls that do not fit the signature)
        let key = self.key(leaves)?;
        let sized = has_unknown_dims(&key);
        if !sized {
            self.check_max_traces()?;
        }
        // trace without holding the lock (the closure may call this function)
        let traced = self.trace(args, &repeats)?;
        let exact = exact_key(leaves);
        if sized {
            // another size of a signature with `None` dims: an entry whose
            // trace is this one's serves it too
            let mut cache = self.lock();
            let found = cache.entries.iter().position(|e| {
                e.key == key && e.repeats == repeats && e.traced.as_ref().is_some_and(|t| t.matches(&traced))
            });
            if let Some(i) = found {
                let mut e = cache.entries.remove(i);
                if e.sizes.len() >= MAX_SIZES {
                    e.sizes.remove(0);
                }
                e.sizes.push(exact);
                let hit = (e.concrete.clone(), e.template.clone());
                cache.entries.push(e);
                return Ok(hit);
            }
            drop(cache);
            self.check_max_traces()?;
        }
        let record = sized.then(|| Traced::of(&traced));
        let (concrete, template) = self.finish(args, traced, &repeats)?;
        let template = Arc::new(template);
        let mut cache = self.lock();
        cache.traces += 1;
        cache.entries.push(Entry {
            key,
            sizes: vec![exact],
            repeats,
            traced: record,
            concrete: concrete.clone(),
            template: template.clone(),
        });
        if cache.entries.len() > self.options.max_cached.max(1) {
            cache.entries.remove(0);
        }
        Ok((concrete, template))
    }

    /// Fails if one more trace would pass [`FunctionOptions::max_traces`].
    fn check_max_traces(&self) -> Result<()> {
        let Some(max) = self.options.max_traces else {
            return Ok(());
        };
        if self.lock().traces >= max {
            return Err(Error::invalid(
                "function",
                format!(
                    "'{}' would be traced a {}th time (max_traces = {max}); calls with new shapes or \
                     dtypes retrace: give it an input_signature with None dims",
                    self.options.name,
                    max + 1
                ),
            ));
        }
        Ok(())
    }

    /// Traces the closure on `args` (nested in the current trace, if one
    /// is recording). A trace whose code made variables is traced once
    /// more, as TensorFlow does: a closure that makes its variables once
    /// (a layer built at its first call, in a `OnceLock`) makes none the
    /// second time and its second trace is the graph; one that makes a
    /// variable at every trace would make a new one per trace, holding
    /// state no eager call has (each eager call starts from a new
    /// variable), and is an error.
    fn trace(&self, args: &I, repeats: &[(u32, u32)]) -> Result<trace::Traced<O>> {
        let first = self.trace_once(args, repeats)?;
        if first.created == 0 {
            return Ok(first);
        }
        let again = self.trace_once(args, repeats)?;
        if again.created > 0 {
            return Err(Error::invalid(
                "function",
                format!(
                    "'{}' makes {} variable(s) each time it is traced: a traced function may make \
                     variables at its first trace only (TensorFlow's tf.function: singleton variables \
                     made at the first call); make them outside the closure, or once (in a OnceLock)",
                    self.options.name, again.created
                ),
            ));
        }
        Ok(again)
    }

    /// One trace of the closure on `args` (a repeated tensor gets its first
    /// argument's placeholder: see [`shared_args`]).
    fn trace_once(&self, args: &I, repeats: &[(u32, u32)]) -> Result<trace::Traced<O>> {
        let flat = tensors_of(args);
        let f = self.f.clone();
        trace::trace(&flat, &[], trace::recording(), |aliases| {
            let a = args.rebuild(&mut shared_args::share(aliases, repeats).into_iter())?;
            let o = f(&a)?;
            let outs = tensors_of(&o);
            Ok((o, outs))
        })
    }

    /// The concrete function of a finished trace, and its output structure.
    fn finish(&self, args: &I, traced: trace::Traced<O>, repeats: &[(u32, u32)]) -> Result<(Arc<ConcreteFunction>, O)> {
        // the structure alone: tensors replaced by placeholders
        let template = traced.value.rebuild(&mut std::iter::repeat_with(placeholder))?;
        let arg_template = args.rebuild(&mut std::iter::repeat_with(placeholder))?;
        let f = self.f.clone();
        let repeats = repeats.to_vec();
        let flat_fn: FlatFn = Arc::new(move |xs: &[Tensor]| {
            let a = arg_template.rebuild(&mut shared_args::share(xs, &repeats).into_iter())?;
            Ok(tensors_of(&f(&a)?))
        });
        let concrete = ConcreteFunction::new(
            self.options.name.clone(),
            traced.graph,
            traced.captures,
            traced.variables,
            flat_fn,
            self.options.optimize.then_some(self.options.compile),
        )?;
        Ok((Arc::new(concrete), template))
    }

    /// Calls the function: traces it first if no graph fits the arguments'
    /// signature, then runs the graph. Where an op whose output shape the
    /// values decide (`boolean_mask`, `unique`, `bincount`, `argwhere`,
    /// the sorted segment ops) gives another shape than in the trace, the
    /// ops after it were traced for the old one (a mean's count, a
    /// gradient's broadcast): the call is traced again and runs that
    /// graph, or, where the change comes after the graph wrote a variable
    /// (those writes ran already), fails with an error naming the op and
    /// both shapes. (A training step that masks its loss changes the count
    /// before its update: traced again at each call whose count differs
    /// from its trace's.)
    pub fn call(&self, args: &I) -> Result<O> {
        let mut vecs = CALL_VECS
            .try_with(std::cell::Cell::take)
            .ok()
            .flatten()
            .unwrap_or_default();
        let out = self.call_with(args, &mut vecs);
        // (emptied by `call_with`: the thread keeps no tensor)
        let _ = CALL_VECS.try_with(|c| c.set(Some(vecs)));
        out
    }

    /// [`call`](Self::call) with these vectors (left empty).
    fn call_with(&self, args: &I, vecs: &mut CallVecs) -> Result<O> {
        let mut leaves = reuse_leaves(std::mem::take(&mut vecs.leaves));
        args.leaves(&mut leaves);
        let found = self.lookup_leaves(args, &leaves);
        let inputs = &mut vecs.inputs;
        inputs.extend(leaves.iter().filter_map(|l| match l {
            Leaf::Tensor(t) => Some((*t).clone()),
            Leaf::Variable(_) | Leaf::Tag(_) => None,
        }));
        vecs.leaves = reuse_leaves(leaves);
        let args_len = inputs.len();
        super::graph::take_shapes_changed();
        let out = found.and_then(|(concrete, template)| {
            inputs.extend(concrete.captures().iter().cloned());
            match concrete.call_inputs_into(inputs, &mut vecs.outputs) {
                // a shape the values decide changed since the trace (a
                // mask that keeps another count): the graph after it was
                // traced for the old shapes, so this call is traced
                // again, as TensorFlow's graphs carry such shapes
                // unknown; not where the graph writes state, which ran
                // up to the failing node and would run again
                Err(_)
                    if super::graph::take_shapes_changed() == Changed::BeforeWrites
                        && (concrete.runs_traced_graph() || !concrete.graph().writes_state()) =>
                {
                    let mut leaves = Vec::new();
                    args.leaves(&mut leaves);
                    let repeats = shared_args::repeats(&leaves);
                    let (again, template) = self.finish(args, self.trace(args, &repeats)?, &repeats)?;
                    inputs.truncate(args_len);
                    inputs.extend(again.captures().iter().cloned());
                    again.call_inputs_into(inputs, &mut vecs.outputs)?;
                    template.rebuild(&mut vecs.outputs.drain(..))
                }
                Err(e) => Err(e),
                Ok(()) => template.rebuild(&mut vecs.outputs.drain(..)),
            }
        });
        vecs.inputs.clear();
        vecs.outputs.clear();
        out
    }

    /// The concrete function that serves these arguments (tracing if
    /// needed), to inspect its graph.
    pub fn concrete(&self, args: &I) -> Result<Arc<ConcreteFunction>> {
        Ok(self.lookup(args)?.0)
    }

    /// The graph that serves these arguments (tracing if needed).
    ///
    /// ```
    /// use gradtape::{function, Tensor};
    /// let f = function(|x: &Tensor| {
    ///     let unused = x.exp()?; // dead code: not in the graph
    ///     x.sin()
    /// });
    /// let g = f.graph(&Tensor::scalar(1.0f32))?;
    /// assert_eq!(g.count("Exp"), 0);
    /// assert_eq!(g.count("Sin"), 1);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn graph(&self, args: &I) -> Result<Graph> {
        Ok(self.concrete(args)?.graph().clone())
    }
}

/// Whether a key has a tensor of a signature with `None` dims.
fn has_unknown_dims(key: &[LeafKey]) -> bool {
    key.iter()
        .any(|k| matches!(k, LeafKey::Tensor(s) if sizes::has_unknown_dims(s)))
}

/// The key of these leaves with every tensor's own dtype and shape.
fn exact_key(leaves: &[Leaf<'_>]) -> Vec<LeafKey> {
    leaves
        .iter()
        .map(|l| match l {
            Leaf::Tensor(t) => LeafKey::Tensor(TensorSpec::of(t)),
            Leaf::Variable(v) => LeafKey::Variable(v.handle()),
            Leaf::Tag(t) => LeafKey::Tag(*t),
        })
        .collect()
}

impl Traced {
    fn of<O>(t: &trace::Traced<O>) -> Traced {
        Traced {
            graph: t.graph.clone(),
            captures: t.captures.iter().map(Tensor::id).collect(),
            variables: t.variables.iter().map(Variable::handle).collect(),
        }
    }

    /// Whether `t` recorded this graph, capturing and reading the same.
    fn matches<O>(&self, t: &trace::Traced<O>) -> bool {
        sizes::same_graph(&self.graph, &t.graph)
            && self.captures.iter().copied().eq(t.captures.iter().map(Tensor::id))
            && self
                .variables
                .iter()
                .copied()
                .eq(t.variables.iter().map(Variable::handle))
    }
}

/// The tensor put in structure templates.
fn placeholder() -> Tensor {
    Tensor::scalar(0.0f32)
}

/// Whether leaves fit a cache key: tensors of its specs' dtypes and shapes,
/// the same variables.
fn fits(key: &[LeafKey], leaves: &[Leaf<'_>]) -> bool {
    key.len() == leaves.len()
        && key.iter().zip(leaves).all(|(k, l)| match (k, l) {
            (LeafKey::Tensor(spec), Leaf::Tensor(t)) => spec.accepts(t),
            (LeafKey::Variable(h), Leaf::Variable(v)) => *h == v.handle(),
            (LeafKey::Tag(a), Leaf::Tag(b)) => a == b,
            _ => false,
        })
}
