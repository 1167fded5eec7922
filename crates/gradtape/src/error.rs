//! The one error type of the crate.
//!
//! Every fallible call returns [`Result<T>`](crate::Result). Each variant names
//! the operation that failed (`op`) and the shapes or dtypes involved, so that a
//! message read in a log is enough to find the faulty call.

use crate::tensor::{DType, Device};

/// Shapes in error messages are plain vectors of dimension sizes.
pub type ShapeVec = Vec<usize>;

/// Everything that can go wrong in gradtape.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// Two shapes that must agree (or broadcast) do not.
    #[error("{op}: incompatible shapes {lhs:?} and {rhs:?}")]
    ShapeMismatch {
        /// The operation that failed.
        op: &'static str,
        /// The first shape.
        lhs: ShapeVec,
        /// The second shape.
        rhs: ShapeVec,
    },
    /// The contracted (inner) dimensions of a matrix product differ: `a`'s
    /// columns against `b`'s rows, each after its transpose flag (so the
    /// axes named are those of the shapes as given).
    #[error(
        "{op}: inner dimensions differ: a's {lhs_dim} (axis {lhs_axis}) vs b's {rhs_dim} (axis {rhs_axis}), \
         shapes {lhs:?} and {rhs:?}"
    )]
    InnerDimMismatch {
        /// The operation that failed.
        op: &'static str,
        /// The first operand's shape.
        lhs: ShapeVec,
        /// The second operand's shape.
        rhs: ShapeVec,
        /// The first operand's contracted axis.
        lhs_axis: usize,
        /// The second operand's contracted axis.
        rhs_axis: usize,
        /// The first operand's contracted dimension.
        lhs_dim: usize,
        /// The second operand's contracted dimension.
        rhs_dim: usize,
    },
    /// Two dtypes that must agree do not.
    #[error("{op}: dtype mismatch, {lhs} vs {rhs}")]
    DTypeMismatch {
        /// The operation that failed.
        op: &'static str,
        /// The first dtype.
        lhs: DType,
        /// The second dtype.
        rhs: DType,
    },
    /// The op does not accept this dtype.
    #[error("{op}: unsupported dtype {dtype} (expected {expected})")]
    UnsupportedDType {
        /// The operation that failed.
        op: &'static str,
        /// The dtype given.
        dtype: DType,
        /// What the op accepts.
        expected: &'static str,
    },
    /// An axis outside `-rank..rank`, or (`repeated`) listed twice.
    #[error(
        "{op}: axis {axis} is {} for a tensor of shape {shape:?}",
        if *.repeated { "repeated" } else { "out of range" }
    )]
    BadAxis {
        /// The operation that failed.
        op: &'static str,
        /// The axis given.
        axis: isize,
        /// The shape involved.
        shape: ShapeVec,
        /// Whether the axis is in range but listed twice.
        repeated: bool,
    },
    /// An index outside `0..dim`.
    #[error("{op}: index {index} is out of range for dimension of size {dim} (shape {shape:?})")]
    IndexOutOfRange {
        /// The operation that failed.
        op: &'static str,
        /// The index given.
        index: i64,
        /// The size of the indexed dimension.
        dim: usize,
        /// The shape involved.
        shape: ShapeVec,
    },
    /// The number of elements does not fit the requested shape.
    #[error("{op}: cannot give {numel} elements the shape {shape:?}")]
    BadReshape {
        /// The operation that failed.
        op: &'static str,
        /// The number of elements available.
        numel: usize,
        /// The shape involved.
        shape: ShapeVec,
    },
    /// A shape whose element count does not fit in memory addresses: the
    /// product of its dimensions exceeds `isize::MAX` (2^63 - 1 on 64-bit
    /// targets). TensorFlow's `InvalidArgumentError` "would have more than
    /// 2**63 - 1 elements". Unlike TensorFlow, a shape with a 0 dimension is
    /// held to the same bound by its other dimensions (`[0, 2^62, 2^62]` is
    /// refused), so that every partial product of a valid shape fits.
    #[error("{op}: shape {shape:?} would have more than isize::MAX (2^63 - 1) elements")]
    ShapeOverflow {
        /// The operation that failed.
        op: &'static str,
        /// The shape involved.
        shape: ShapeVec,
    },
    /// A buffer that could not be allocated: more than `isize::MAX` bytes,
    /// or more than the system would give. TensorFlow's
    /// `ResourceExhaustedError` ("OOM when allocating tensor"). The
    /// operation fails cleanly; nothing else is affected.
    #[error("{op}: out of memory allocating {bytes} bytes")]
    OutOfMemory {
        /// The operation that failed.
        op: &'static str,
        /// The size of the allocation asked for, in bytes.
        bytes: u128,
    },
    /// Any other invalid argument; `msg` says which and why.
    #[error("{op}: {msg}")]
    InvalidArgument {
        /// The operation that failed.
        op: &'static str,
        /// What is wrong.
        msg: String,
    },
    /// `output_gradients` has a different length than the targets.
    #[error("gradient: {got} output_gradients given for {expected} targets")]
    OutputGradientsCount {
        /// How many targets.
        expected: usize,
        /// How many output gradients.
        got: usize,
    },
    /// An output gradient's shape or dtype differs from its target's.
    #[error(
        "gradient: output_gradients[{index}] has shape {got:?} and dtype {got_dtype}, \
         but its target has shape {expected:?} and dtype {expected_dtype}"
    )]
    OutputGradientShape {
        /// Which output gradient.
        index: usize,
        /// The expected shape.
        expected: ShapeVec,
        /// The expected dtype.
        expected_dtype: DType,
        /// The shape given.
        got: ShapeVec,
        /// The dtype given.
        got_dtype: DType,
    },
    /// A one-shot tape was asked for gradients a second time.
    #[error(
        "{op}: this GradientTape is not persistent and has already computed one set of \
         gradients; create it with GradientTape::persistent() to call it more than once"
    )]
    TapeNotPersistent {
        /// The call that was refused.
        op: &'static str,
    },
    /// `stop_recording` on a tape that is not recording.
    #[error("stop_recording: the tape is not recording")]
    TapeNotRecording,
    /// Entering a tape that is already recording.
    #[error("record: the tape is already recording; a tape cannot be entered twice")]
    TapeAlreadyRecording,
    /// Assigning a value of another shape or dtype to a variable.
    #[error("{op}: variable '{name}' has shape {expected:?} and dtype {expected_dtype}, got shape {got:?} and dtype {got_dtype}")]
    VariableMismatch {
        /// The operation that failed.
        op: &'static str,
        /// The variable's name.
        name: String,
        /// The expected shape.
        expected: ShapeVec,
        /// The expected dtype.
        expected_dtype: DType,
        /// The shape given.
        got: ShapeVec,
        /// The dtype given.
        got_dtype: DType,
    },
    /// An op's inputs live on two devices (no copy is made behind the
    /// caller's back: move one with `Tensor::to`).
    #[error("{op}: inputs on two devices, {lhs} and {rhs} (move one with .to(device))")]
    DeviceMismatch {
        /// The op.
        op: &'static str,
        /// The device of its first input.
        lhs: Device,
        /// The first other device among its inputs.
        rhs: Device,
    },
    /// An op cannot run on a device: no GPU there, a CUDA library missing,
    /// no kernel for this op or dtype on that device, or a CUDA error.
    #[error("{op} on {device}: {msg}")]
    Device {
        /// The op.
        op: &'static str,
        /// The device.
        device: Device,
        /// What went wrong.
        msg: String,
    },
    /// A gradient check found analytic and numeric derivatives that disagree.
    #[error("check_gradients: {0}")]
    GradientCheck(String),
    /// An op failed while a traced function's graph ran (an index out of
    /// range, an integer division by zero: what depends on values): the
    /// function, the op the user called as the trace recorded it, with its
    /// operands' shapes and dtypes, and the op's own error. Eager calls
    /// report the op's error alone.
    ///
    /// ```
    /// use gradtape::{Error, Function, FunctionOptions, Tensor};
    /// let opts = FunctionOptions { name: "step".into(), ..Default::default() };
    /// let f = Function::with_options(|(x, i): &(Tensor, Tensor)| x.gather(i, 0), opts);
    /// let x = Tensor::from_vec(vec![1.0f32; 12], &[4, 3])?;
    /// f.call(&(x.clone(), Tensor::vector(&[0i64, 3])))?;
    /// let e = f.call(&(x, Tensor::vector(&[0i64, 7]))).unwrap_err();
    /// assert!(e.to_string().starts_with("in traced function 'step': gather (params [4, 3] f32, indices [2] i64): "), "{e}");
    /// assert!(matches!(e.innermost(), Error::IndexOutOfRange { .. }));
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    #[error("{}", in_function(function, site, source))]
    InFunction {
        /// The traced function's name (empty for a graph run on its own).
        function: String,
        /// The op the user called and its operands, as traced (or the
        /// graph's node, for a node no public op's site covers).
        site: String,
        /// The op's error.
        source: Box<Error>,
    },
}

fn in_function(function: &str, site: &str, source: &Error) -> String {
    match function {
        "" => format!("in a traced graph: {site}: {source}"),
        f => format!("in traced function '{f}': {site}: {source}"),
    }
}

/// `Result` with gradtape's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn invalid(op: &'static str, msg: impl Into<String>) -> Self {
        Error::InvalidArgument { op, msg: msg.into() }
    }

    /// The error an op raised: within an [`Error::InFunction`] (a traced
    /// function's graph failed), the op's own error; else this one.
    ///
    /// ```
    /// use gradtape::{Error, Tensor};
    /// let e = Tensor::vector(&[1i32]).div(&Tensor::vector(&[0i32])).unwrap_err();
    /// assert!(std::ptr::eq(e.innermost(), &e));
    /// # let _: &Error = e.innermost();
    /// ```
    pub fn innermost(&self) -> &Error {
        match self {
            Error::InFunction { source, .. } => source.innermost(),
            e => e,
        }
    }

    /// This error raised by graph node `site` (described only now, when
    /// it failed), as [`Error::InFunction`] with the function's name left
    /// for [`in_function`](Self::in_function); an error already placed (in
    /// a nested graph) stays as it is.
    #[cold]
    pub(crate) fn at_node(self, site: impl FnOnce() -> String) -> Self {
        match self {
            e @ Error::InFunction { .. } => e,
            e => Error::InFunction {
                function: String::new(),
                site: site(),
                source: Box::new(e),
            },
        }
    }

    /// The name of the traced function whose graph raised this error,
    /// where the graph's executor left it out.
    #[cold]
    pub(crate) fn in_function(mut self, name: &str) -> Self {
        if let Error::InFunction { function, .. } = &mut self
            && function.is_empty()
        {
            *function = name.to_string();
        }
        self
    }

    /// The same error reported for `op`: a thin composite (an op that is
    /// another op with fixed arguments) names itself, the op the user
    /// called, not the inner op that found the argument bad (or the size
    /// too large).
    pub(crate) fn for_op(mut self, op: &'static str) -> Self {
        match &mut self {
            Error::ShapeMismatch { op: o, .. }
            | Error::InnerDimMismatch { op: o, .. }
            | Error::DTypeMismatch { op: o, .. }
            | Error::UnsupportedDType { op: o, .. }
            | Error::BadAxis { op: o, .. }
            | Error::IndexOutOfRange { op: o, .. }
            | Error::BadReshape { op: o, .. }
            | Error::InvalidArgument { op: o, .. }
            | Error::ShapeOverflow { op: o, .. }
            | Error::OutOfMemory { op: o, .. } => *o = op,
            _ => {}
        }
        self
    }
}
