//! [`Collectives`] over MPI (feature `mpi`): rsmpi's `SimpleCommunicator`.

use mpi::collective::SystemOperation;
use mpi::datatype::PartitionMut;
use mpi::topology::SimpleCommunicator;
use mpi::traits::{Communicator, CommunicatorCollectives, Equivalence, Root};
use mpi::Count;

use super::{Buffer, BufferMut, Collectives};
use crate::error::{Error, Result};

/// An element count as MPI's `int`.
fn count(op: &'static str, n: usize) -> Result<Count> {
    Count::try_from(n).map_err(|_| {
        Error::invalid(
            op,
            format!("{n} elements exceed MPI's count limit of {} per call", Count::MAX),
        )
    })
}

fn mismatch(op: &'static str) -> Error {
    Error::invalid(op, "send and recv buffers of different types")
}

fn reduce<T: Equivalence + Copy>(comm: &SimpleCommunicator, buf: &mut [T]) -> Result<()> {
    count("MPI all_reduce_sum", buf.len())?;
    let send = buf.to_vec();
    comm.all_reduce_into(&send[..], buf, SystemOperation::sum());
    Ok(())
}

fn gather<T: Equivalence>(comm: &SimpleCommunicator, send: &[T], counts: &[usize], recv: &mut [T]) -> Result<()> {
    const OP: &str = "MPI all_gather";
    let size = comm.size() as usize;
    let total: usize = counts.iter().sum();
    if counts.len() != size || recv.len() != total || counts.get(comm.rank() as usize) != Some(&send.len()) {
        return Err(Error::invalid(
            OP,
            format!(
                "counts {counts:?} for {size} ranks, send {} and recv {} elements do not agree",
                send.len(),
                recv.len()
            ),
        ));
    }
    count(OP, total)?;
    let counts: Vec<Count> = counts.iter().map(|&c| c as Count).collect();
    let displs: Vec<Count> = counts
        .iter()
        .scan(0, |acc, &c| {
            let d = *acc;
            *acc += c;
            Some(d)
        })
        .collect();
    let mut partition = PartitionMut::new(recv, counts, displs);
    comm.all_gather_varcount_into(send, &mut partition);
    Ok(())
}

fn bcast<T: Equivalence>(comm: &SimpleCommunicator, buf: &mut [T], root: usize) -> Result<()> {
    const OP: &str = "MPI broadcast";
    count(OP, buf.len())?;
    let size = comm.size() as usize;
    if root >= size {
        return Err(Error::invalid(OP, format!("root {root} out of range for {size} ranks")));
    }
    comm.process_at_rank(root as mpi::Rank).broadcast_into(buf);
    Ok(())
}

/// MPI's collectives: `MPI_Allreduce` (sum), `MPI_Allgatherv`, `MPI_Bcast`.
impl Collectives for SimpleCommunicator {
    fn this_rank(&self) -> usize {
        self.rank() as usize
    }

    fn num_ranks(&self) -> usize {
        self.size() as usize
    }

    fn all_reduce_sum(&self, buf: BufferMut<'_>) -> Result<()> {
        match buf {
            BufferMut::F32(b) => reduce(self, b),
            BufferMut::F64(b) => reduce(self, b),
            BufferMut::I32(b) => reduce(self, b),
            BufferMut::I64(b) => reduce(self, b),
        }
    }

    fn all_gather(&self, send: Buffer<'_>, counts: &[usize], recv: BufferMut<'_>) -> Result<()> {
        match (send, recv) {
            (Buffer::F32(s), BufferMut::F32(r)) => gather(self, s, counts, r),
            (Buffer::F64(s), BufferMut::F64(r)) => gather(self, s, counts, r),
            (Buffer::I32(s), BufferMut::I32(r)) => gather(self, s, counts, r),
            (Buffer::I64(s), BufferMut::I64(r)) => gather(self, s, counts, r),
            _ => Err(mismatch("MPI all_gather")),
        }
    }

    fn broadcast(&self, buf: BufferMut<'_>, root: usize) -> Result<()> {
        match buf {
            BufferMut::F32(b) => bcast(self, b, root),
            BufferMut::F64(b) => bcast(self, b, root),
            BufferMut::I32(b) => bcast(self, b, root),
            BufferMut::I64(b) => bcast(self, b, root),
        }
    }
}
