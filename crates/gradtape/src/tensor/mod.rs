//! `Tensor`: an immutable, cheaply cloned value with a unique id.
//!
//! A tensor is an `Arc` handle on `(id, layout, storage)`. The storage is a
//! typed buffer shared between views, so reshape, transpose, broadcast and
//! identity make a new tensor (with a new id) without copying data. Nothing in
//! this layer knows about automatic differentiation; the id is what the tape
//! keys its records by.
//!
//! Small buffers (up to [`Buf`]'s inline capacity: a scalar, say) are held in
//! place in the handle's allocation, and a view of one copies them (16 bytes
//! at most) instead of sharing them, so that a scalar tensor costs one
//! allocation, not three. Per-op overhead on small tensors is dominated by
//! allocations.

pub(crate) mod alloc;
mod create;
pub(crate) mod device;
pub(crate) mod display;
pub mod dtype;
pub(crate) mod layout;
pub(crate) mod observe;
pub(crate) mod pool;
pub(crate) mod recycle;
pub use pool::{buffer_cache_bytes, clear_buffer_cache, set_buffer_cache_limit};

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub use device::{
    allow_tf32, cuda_device_count, cuda_graph_launches, cuda_is_available, emulate_cuda_on_host,
    set_soft_device_placement, soft_device_placement, tf32_allowed, Device,
};
pub(crate) use device::{DeviceBuffer, Mem};
pub use dtype::{bf16, f16, Complex, DType, Element, Float, Num};
pub(crate) use dtype::{with_complex_dtype, with_real_dtype};
pub(crate) use dtype::{with_dtype, with_float_dtype, with_num_dtype};
#[doc(hidden)]
pub use dtype::{Buf, Storage};
pub(crate) use layout::Layout;
pub use layout::Shape;

use crate::error::{Error, Result};

/// The unique identity of a tensor (or of a variable's handle).
///
/// Ids are never reused within a process, so a tape can key its records by
/// them without keeping the tensors alive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorId(pub(crate) u64);

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Ids are handed to each thread in blocks of this many, so that making a
/// tensor costs no atomic operation (ids stay unique, and increasing within
/// a thread).
const ID_BLOCK: u64 = 1024;

thread_local! {
    /// The next id of this thread's block and the end of the block.
    static IDS: std::cell::Cell<(u64, u64)> = const { std::cell::Cell::new((0, 0)) };
}

impl TensorId {
    #[inline]
    pub(crate) fn fresh() -> Self {
        IDS.with(|c| {
            let (mut next, mut end) = c.get();
            if next == end {
                next = NEXT_ID.fetch_add(ID_BLOCK, Ordering::Relaxed);
                end = next + ID_BLOCK;
            }
            c.set((next + 1, end));
            TensorId(next)
        })
    }

    /// An id drawn from the global counter itself: ids made this way are
    /// ordered by creation across threads (variable handles rely on it).
    pub(crate) fn fresh_ordered() -> Self {
        TensorId(NEXT_ID.fetch_add(1, Ordering::Relaxed))
    }
}

/// An immutable n-dimensional array.
///
/// Clone is an `Arc` increment and keeps the id; every operation returns a new
/// tensor with a new id. Tensors are `Send + Sync`.
///
/// ```
/// use gradtape::Tensor;
/// let t = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2])?;
/// assert_eq!(t.shape(), &[2, 2]);
/// assert_eq!(t.to_vec::<f32>()?, vec![1.0, 2.0, 3.0, 4.0]);
/// # Ok::<(), gradtape::Error>(())
/// ```
#[derive(Clone)]
pub struct Tensor {
    /// (dropped by `Drop`, which may keep it for reuse: see [`recycle`])
    inner: std::mem::ManuallyDrop<Arc<Inner>>,
}

impl Drop for Tensor {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: `inner` is taken once, here, and the handle is never used
        // again (it is being dropped).
        let inner = unsafe { std::mem::ManuallyDrop::take(&mut self.inner) };
        recycle::dropped(inner);
    }
}

struct Inner {
    id: TensorId,
    layout: Layout,
    data: Data,
}

/// Where a tensor's elements live.
enum Data {
    /// A buffer that fits inline, held in place (views copy it).
    Inline(Storage),
    /// A heap buffer, shared by views.
    Shared(Arc<Storage>),
    /// A device's memory, shared by views.
    Device(Arc<DeviceBuffer>),
}

impl Data {
    /// The host buffer.
    ///
    /// # Panics
    /// For a tensor on a device: a CPU kernel reached it, past the checks
    /// every op makes (`dispatch::device::placement`, [`Tensor::values`]).
    #[inline]
    fn storage(&self) -> &Storage {
        match self {
            Data::Inline(s) => s,
            Data::Shared(s) => s,
            Data::Device(b) => panic!("gradtape internal error: a CPU kernel reached a tensor on {}", b.device),
        }
    }

    #[inline]
    fn len(&self) -> usize {
        match self {
            Data::Inline(s) => s.len(),
            Data::Shared(s) => s.len(),
            Data::Device(b) => b.len,
        }
    }

    #[inline]
    fn dtype(&self) -> DType {
        match self {
            Data::Inline(s) => s.dtype(),
            Data::Shared(s) => s.dtype(),
            Data::Device(b) => b.dtype,
        }
    }
}

impl Tensor {
    /// Wraps a new buffer as a contiguous tensor.
    ///
    /// # Panics
    /// If `shape` does not hold exactly the buffer's elements: a kernel's
    /// bug, caught here before any view of the buffer could read outside it
    /// (user input cannot reach it: shapes are checked where they enter).
    #[inline]
    pub(crate) fn from_storage(storage: Storage, shape: &[usize]) -> Tensor {
        assert!(
            layout::checked_numel("from_storage", shape).ok() == Some(storage.len()),
            "gradtape internal error: a buffer of {} elements given the shape {shape:?}",
            storage.len()
        );
        let data = if storage.is_inline() {
            Data::Inline(storage)
        } else {
            match recycle::shared(storage, shape) {
                Ok(t) => return t,
                Err(storage) => Data::Shared(Arc::new(storage)),
            }
        };
        Tensor::from_data(data, Layout::contiguous(shape))
    }

    #[inline]
    fn from_data(data: Data, layout: Layout) -> Tensor {
        let (data, layout) = match recycle::handle(data, layout) {
            Ok(t) => return t,
            Err(back) => back,
        };
        Tensor {
            inner: std::mem::ManuallyDrop::new(Arc::new(Inner {
                id: TensorId::fresh(),
                layout,
                data,
            })),
        }
    }

    /// A new tensor (new id) viewing the same storage with another layout.
    ///
    /// # Panics
    /// If the layout reaches outside the storage: a view op's bug, caught
    /// before anything reads through it (see [`Layout::fits_in`]).
    pub(crate) fn view(&self, layout: Layout) -> Tensor {
        assert!(
            layout.fits_in(self.inner.data.len()),
            "gradtape internal error: the view {layout:?} reaches outside a buffer of {} elements",
            self.inner.data.len()
        );
        let data = match &self.inner.data {
            Data::Inline(s) => Data::Inline(s.clone()),
            Data::Shared(s) => Data::Shared(s.clone()),
            Data::Device(b) => Data::Device(b.clone()),
        };
        Tensor::from_data(data, layout)
    }

    /// A new tensor with a new id and the same storage and layout.
    pub(crate) fn alias(&self) -> Tensor {
        self.view(self.inner.layout.clone())
    }

    /// This tensor's unique id.
    #[inline]
    pub fn id(&self) -> TensorId {
        self.inner.id
    }

    /// The element type.
    #[inline]
    pub fn dtype(&self) -> DType {
        self.inner.data.dtype()
    }

    /// Where the elements live ([`Device::Cpu`] unless moved with
    /// [`to`](Self::to) or made from tensors on a GPU).
    #[inline]
    pub fn device(&self) -> Device {
        match &self.inner.data {
            Data::Device(b) => b.device,
            _ => Device::Cpu,
        }
    }

    /// The device buffer of a tensor on a device.
    #[inline]
    pub(crate) fn device_buffer(&self) -> Option<&Arc<DeviceBuffer>> {
        match &self.inner.data {
            Data::Device(b) => Some(b),
            _ => None,
        }
    }

    /// A tensor of a device buffer (contiguous, `shape`).
    ///
    /// # Panics
    /// If `shape` does not hold exactly the buffer's elements (a kernel's
    /// bug, as in [`from_storage`](Self::from_storage)).
    pub(crate) fn from_device_buffer(buffer: DeviceBuffer, shape: &[usize]) -> Tensor {
        Tensor::device_view(Arc::new(buffer), Layout::contiguous(shape))
    }

    /// A view of a device buffer.
    ///
    /// # Panics
    /// If the layout reaches outside the buffer (a kernel's bug).
    pub(crate) fn device_view(buffer: Arc<DeviceBuffer>, layout: Layout) -> Tensor {
        assert!(
            layout.fits_in(buffer.len),
            "gradtape internal error: the view {layout:?} reaches outside a device buffer of {} elements",
            buffer.len
        );
        Tensor::from_data(Data::Device(buffer), layout)
    }

    /// Dimension sizes; empty for a scalar.
    #[inline]
    pub fn shape(&self) -> &[usize] {
        &self.inner.layout.shape
    }

    /// Number of dimensions.
    #[inline]
    pub fn rank(&self) -> usize {
        self.inner.layout.shape.len()
    }

    /// Number of elements (1 for a scalar, 0 if any dimension is 0).
    #[inline]
    pub fn numel(&self) -> usize {
        self.inner.layout.numel()
    }

    /// Size of dimension `axis` (negative counts from the end).
    pub fn dim(&self, axis: isize) -> Result<usize> {
        let a = layout::norm_axis("dim", axis, self.shape())?;
        Ok(self.shape()[a])
    }

    /// Element strides of the view (zero on broadcast dimensions).
    pub fn strides(&self) -> &[isize] {
        &self.inner.layout.strides
    }

    /// Whether the view is row-major without gaps.
    pub fn is_contiguous(&self) -> bool {
        self.inner.layout.is_contiguous()
    }

    /// Number of live handles on this tensor (this id). Useful in tests that
    /// check what a tape keeps alive.
    pub fn ref_count(&self) -> usize {
        Arc::strong_count(&self.inner)
    }

    /// A weak handle that does not keep the tensor alive.
    pub fn downgrade(&self) -> WeakTensor {
        WeakTensor(Arc::downgrade(&self.inner))
    }

    /// The elements in the buffer (host or device), not only this view's.
    #[inline]
    pub(crate) fn host_len(&self) -> usize {
        self.inner.data.len()
    }

    /// A copy of a host tensor's whole buffer.
    pub(crate) fn storage_clone(&self) -> Storage {
        self.inner.data.storage().clone()
    }

    #[inline]
    pub(crate) fn layout(&self) -> &Layout {
        &self.inner.layout
    }

    /// The whole underlying buffer typed as `T` (not only this view's part).
    #[inline]
    pub(crate) fn buffer<T: Element>(&self) -> &[T] {
        T::slice(self.inner.data.storage()).expect("dtype checked by caller")
    }

    /// The elements of a tensor that nothing else references (no other
    /// handle, no view sharing its buffer) and that covers its whole buffer
    /// contiguously, for updating in place; `None` otherwise (or for another
    /// dtype). The tensor gets a fresh id, since its value will change.
    pub(crate) fn unique_values_mut<T: Element>(&mut self) -> Option<&mut [T]> {
        let inner = Arc::get_mut(&mut self.inner)?;
        let n = inner.layout.numel();
        if !inner.layout.is_contiguous() || inner.layout.offset != 0 {
            return None;
        }
        let storage = match &mut inner.data {
            Data::Inline(s) => s,
            Data::Shared(s) => Arc::get_mut(s)?,
            Data::Device(_) => return None,
        };
        let values = T::slice_mut(storage)?;
        if values.len() != n {
            return None;
        }
        inner.id = TensorId::fresh();
        Some(values)
    }

    /// The elements in row-major order: borrowed when the view is contiguous,
    /// gathered otherwise (an [`Error::OutOfMemory`] naming `op` when the
    /// copy cannot be allocated: a large broadcast view, say).
    pub(crate) fn values<T: Element>(&self, op: &'static str) -> Result<Cow<'_, [T]>> {
        crate::kernels::gpu::expect_host(op, self)?;
        let buf = self.buffer::<T>();
        let l = self.layout();
        let n = l.numel();
        Ok(if l.is_contiguous() {
            Cow::Borrowed(&buf[l.offset..l.offset + n])
        } else {
            Cow::Owned(crate::kernels::cpu::gather_strided(op, buf, l)?)
        })
    }

    /// The elements in row-major order in a new `Vec` (allocated fallibly).
    pub(crate) fn owned_values<T: Element>(&self, op: &'static str) -> Result<Vec<T>> {
        Ok(match self.values::<T>(op)? {
            Cow::Borrowed(s) => {
                let mut v = alloc::try_vec(op, s.len())?;
                v.extend_from_slice(s);
                v
            }
            Cow::Owned(v) => v,
        })
    }

    /// The elements as `f64` (the real parts of complex ones), allocated
    /// fallibly.
    pub(crate) fn f64_values(&self, op: &'static str) -> Result<Vec<f64>> {
        with_dtype!(self.dtype(), T => alloc::try_collect(op, self.values::<T>(op)?.iter().map(|x| x.to_f64())))
    }

    /// Fails for a tensor whose value a trace only knows when its graph
    /// runs (reading it would freeze this run's value into the graph).
    pub(crate) fn expect_readable(&self, op: &'static str) -> Result<()> {
        if observe::unreadable(self) {
            return Err(Error::invalid(
                op,
                format!(
                    "cannot read the values of a {} tensor of shape {:?} inside a traced function: they are known \
                     only when the graph runs (use cond or while_loop to decide on them)",
                    self.dtype(),
                    self.shape()
                ),
            ));
        }
        Ok(())
    }

    /// Checks that `T` is this tensor's element type.
    fn expect_dtype<T: Element>(&self, op: &'static str) -> Result<()> {
        if self.dtype() != T::DTYPE {
            return Err(Error::DTypeMismatch {
                op,
                lhs: self.dtype(),
                rhs: T::DTYPE,
            });
        }
        Ok(())
    }

    /// Copies the elements out in row-major order. `T` must be the dtype.
    ///
    /// An [`Error::OutOfMemory`] if the copy cannot be allocated (a broadcast
    /// view of more elements than fit in memory, say).
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        self.expect_dtype::<T>("to_vec")?;
        self.expect_readable("to_vec")?;
        if self.device().is_cuda() {
            return crate::kernels::gpu::to_host("to_vec", self)?.owned_values("to_vec");
        }
        self.owned_values("to_vec")
    }

    /// The elements as `f64`, whatever the dtype (the real parts of a complex
    /// tensor). A helper for tests and quick looks.
    ///
    /// # Panics
    /// If the copy cannot be allocated (a broadcast view of more elements
    /// than fit in memory), or for a value a traced function computes (known
    /// only when its graph runs); [`to_vec`](Self::to_vec) and
    /// [`try_to_vec_f64`](Self::try_to_vec_f64) return these as errors.
    #[track_caller]
    pub fn to_vec_f64(&self) -> Vec<f64> {
        match self.try_to_vec_f64() {
            Ok(v) => v,
            Err(e) => panic!("{e}"),
        }
    }

    /// The elements as `f64`, whatever the dtype (the real parts of a complex
    /// tensor); an error where [`to_vec_f64`](Self::to_vec_f64) panics.
    ///
    /// ```
    /// let t = gradtape::Tensor::vector(&[1i64, 2]);
    /// assert_eq!(t.try_to_vec_f64()?, vec![1.0, 2.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn try_to_vec_f64(&self) -> Result<Vec<f64>> {
        self.expect_readable("to_vec_f64")?;
        if self.device().is_cuda() {
            return crate::kernels::gpu::to_host("to_vec_f64", self)?.f64_values("to_vec_f64");
        }
        self.f64_values("to_vec_f64")
    }

    /// The single element of a tensor with one element. `T` must be the dtype.
    ///
    /// ```
    /// let t = gradtape::Tensor::scalar(6.0f32);
    /// assert_eq!(t.to_scalar::<f32>()?, 6.0);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn to_scalar<T: Element>(&self) -> Result<T> {
        self.expect_dtype::<T>("to_scalar")?;
        self.expect_readable("to_scalar")?;
        if self.numel() != 1 {
            return Err(Error::invalid(
                "to_scalar",
                format!(
                    "tensor of shape {:?} has {} elements, not 1",
                    self.shape(),
                    self.numel()
                ),
            ));
        }
        if self.device().is_cuda() {
            return crate::kernels::gpu::to_host("to_scalar", self)?.to_scalar();
        }
        Ok(self.buffer::<T>()[self.layout().offset])
    }

    /// The single element as `f64`, whatever the real dtype (an error for a
    /// complex tensor: use [`to_scalar`](Self::to_scalar)).
    pub fn item(&self) -> Result<f64> {
        self.expect_readable("item")?;
        if self.dtype().is_complex() {
            return Err(Error::UnsupportedDType {
                op: "item",
                dtype: self.dtype(),
                expected: "a real dtype (read a complex scalar with to_scalar)",
            });
        }
        if self.numel() != 1 {
            return Err(Error::invalid(
                "item",
                format!(
                    "tensor of shape {:?} has {} elements, not 1",
                    self.shape(),
                    self.numel()
                ),
            ));
        }
        if self.device().is_cuda() {
            return crate::kernels::gpu::to_host("item", self)?.item();
        }
        Ok(with_dtype!(self.dtype(), T => self.buffer::<T>()[self.layout().offset].to_f64()))
    }
}

/// A handle that does not keep a tensor alive; see [`Tensor::downgrade`].
pub struct WeakTensor(std::sync::Weak<Inner>);

impl WeakTensor {
    /// Whether the tensor still exists.
    pub fn is_alive(&self) -> bool {
        self.0.strong_count() > 0
    }

    /// The tensor, while it still exists. (A tensor with a weak handle is
    /// never kept for reuse: `recycle` takes only handles held alone.)
    pub(crate) fn upgrade(&self) -> Option<Tensor> {
        self.0.upgrade().map(|inner| Tensor {
            inner: std::mem::ManuallyDrop::new(inner),
        })
    }
}
