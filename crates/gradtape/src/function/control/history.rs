//! A loop's history while the loop runs: each iteration's value (an entry
//! value of a loop variable, or a residual of the body's gradient) copied
//! at the end of one buffer as it is made.
//!
//! Kept as a list of the iterations' tensors and stacked at the end (as
//! before), every iteration's values stayed alive to the end of the loop:
//! none of their buffers could serve the next iteration (which allocated
//! fresh ones), and the stack copied them all again. Copied into the
//! buffer at once, a value dies when the loop moves on, and the next
//! iteration's outputs take its buffer (see `tensor::recycle`); the buffer
//! becomes the stacked history without another copy. It starts with room
//! for as many rows as the loop's last run kept (`hint`), so a loop that
//! runs as many iterations at every call never grows it; otherwise it grows
//! by doubling.
//!
//! A variable whose next value is also a residual of the body's gradient
//! (see [`residuals`](super::residuals)) keeps one more row, its final
//! value: its history is rows `0..count` of the buffer and the residual's
//! rows `1..=count`, two views of one buffer ([`rows`]).
//!
//! Rows kept as tensors instead: those of a variable whose shape may change
//! (see [`ragged`](super::ragged), the caller's), and any history where a
//! row is on a device or differs in shape or dtype from the first row (the
//! rows so far are then views of what the buffer held, and the stack at the
//! end reports the change of shape, as `stacked_history` does).

use super::loop_checks::stacked_history;
use crate::error::{Error, Result};
use crate::tensor::{with_dtype, Buf, DType, Element, Storage, Tensor};

/// One history being kept.
pub(super) struct History {
    /// the rows copied so far and the shape and dtype of a row (set by the
    /// first row), where the rows go into a buffer
    buf: Option<(Storage, Vec<usize>, DType)>,
    /// rows in `buf`
    count: usize,
    /// the rows as tensors, where they are kept so
    list: Vec<Tensor>,
    /// whether rows are kept as tensors
    as_list: bool,
    /// rows to make room for at the first
    hint: usize,
}

impl History {
    /// A history of rows kept as tensors where `as_list`, else copied into
    /// a buffer with room for `hint` rows at first.
    pub(super) fn new(as_list: bool, hint: usize) -> History {
        History {
            buf: None,
            count: 0,
            list: Vec::new(),
            as_list,
            hint,
        }
    }

    /// The number of rows kept.
    pub(super) fn len(&self) -> usize {
        self.count + self.list.len()
    }

    /// Keeps `t` as the next row.
    pub(super) fn push(&mut self, t: &Tensor) -> Result<()> {
        let fits = |(_, shape, dtype): &(Storage, Vec<usize>, DType)| t.shape() == &shape[..] && t.dtype() == *dtype;
        if !self.as_list && t.device_buffer().is_none() {
            if self.buf.is_none() {
                let storage = with_dtype!(t.dtype(), T => T::buf_into_storage(Buf::<T>::new()));
                self.buf = Some((storage, t.shape().to_vec(), t.dtype()));
            }
            if let Some(b) = self.buf.as_mut().filter(|b| fits(b)) {
                let hint = if self.count == 0 { self.hint } else { 0 };
                with_dtype!(t.dtype(), T => append::<T>(&mut b.0, t, hint))?;
                self.count += 1;
                return Ok(());
            }
        }
        // (from here on, rows as tensors: the rows so far as views of the
        // buffer's)
        if !self.as_list {
            self.as_list = true;
            if let Some(block) = self.take_block()? {
                for i in 0..block.shape()[0] {
                    let row = block.narrow(0, i, 1)?.reshape(&block.shape()[1..])?;
                    self.list.push(row);
                }
            }
        }
        self.list.push(t.clone());
        Ok(())
    }

    /// The buffer's rows as one tensor `[count, row...]`, if it holds any.
    fn take_block(&mut self) -> Result<Option<Tensor>> {
        let Some((storage, shape, _)) = self.buf.take() else {
            return Ok(None);
        };
        let count = std::mem::take(&mut self.count);
        if count == 0 {
            return Ok(None);
        }
        let mut full = vec![count];
        full.extend_from_slice(&shape);
        Ok(Some(Tensor::from_storage(storage, &full)))
    }

    /// The rows kept as tensors (a ragged variable's history).
    pub(super) fn into_list(self) -> Vec<Tensor> {
        self.list
    }

    /// The history as one tensor, its rows the iterations: `[0, shape...]`
    /// zeros of `dtype` where it kept none; the error of
    /// [`stacked_history`] (naming history `k`) where rows kept as tensors
    /// change shape.
    pub(super) fn finish(mut self, k: usize, dtype: DType, shape: &[usize]) -> Result<Tensor> {
        if !self.as_list
            && let Some(block) = self.take_block()?
        {
            return Ok(block);
        }
        if self.list.is_empty() {
            let mut empty = vec![0];
            empty.extend_from_slice(shape);
            return Tensor::try_zeros(&empty, dtype);
        }
        stacked_history(k, &self.list)
    }
}

/// Rows `start..start + count` of a history `full` (a view of its buffer:
/// a variable's history that also keeps the final value gives its entry
/// values, rows `0..count`, and the residual that is the variable's next
/// value, rows `1..=count`, from one buffer).
pub(super) fn rows(full: &Tensor, start: usize, count: usize) -> Tensor {
    let mut begin = vec![0; full.rank()];
    let mut size = full.shape().to_vec();
    begin[0] = start;
    size[0] = count;
    full.block_view(&begin, &size)
}

/// Appends the elements of `t` (of `T`, on the host) to `storage`, making
/// room for exactly `hint` rows of its size first where `hint` > 1 (a
/// buffer of a dead tensor or of the buffer cache where one has that size:
/// no fresh pages to fault in at every call), else growing by doubling.
fn append<T: Element>(storage: &mut Storage, t: &Tensor, hint: usize) -> Result<()> {
    let values = t.values::<T>("while_loop")?;
    let mut buf = T::take_buf(storage).unwrap_or_default();
    if hint > 1 && buf.is_empty() {
        let n = hint.saturating_mul(values.len());
        buf = crate::tensor::alloc::try_buf::<T>("while_loop", n)?;
    }
    let reserved = buf.try_reserve(values.len());
    if reserved.is_ok() {
        buf.extend_from_slice(&values);
    }
    let wanted = (buf.len() + values.len()) as u128 * std::mem::size_of::<T>() as u128;
    *storage = T::buf_into_storage(buf);
    reserved.map_err(|_| Error::OutOfMemory {
        op: "while_loop",
        bytes: wanted,
    })
}
