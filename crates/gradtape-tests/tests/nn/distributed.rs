//! `gradtape::distributed` without MPI: the ranks are threads of this
//! process, joined by a `Collectives` implementation over a barrier and
//! shared slots (`ThreadGroup`, below). The reference values are the
//! same computations done in one process on the whole batch; the expected
//! layouts (rank order of gathered rows, 1/size scaling, traffic) follow
//! Horovod's documented semantics for `allreduce` / `allgather`.

use std::sync::{Arc, Barrier, Mutex};

use gradtape::distributed::{
    allreduce_gradients, allreduce_gradients_with, broadcast_variables, AllreduceOptions, Buffer, BufferMut,
    Collectives, DistributedOptimizer,
};
use gradtape::optim::{Adam, Optimizer, Sgd};
use gradtape::{DType, Error, Gradient, GradientTape, IndexedSlices, Result, Tensor, Variable};

/// A buffer one rank put on the table.
#[derive(Clone)]
enum Owned {
    F32(Vec<f32>),
    F64(Vec<f64>),
    I32(Vec<i32>),
    I64(Vec<i64>),
}

struct Shared {
    barrier: Barrier,
    slots: Mutex<Vec<Option<Owned>>>,
}

/// Rank `rank` of a group of threads.
struct ThreadGroup {
    rank: usize,
    shared: Arc<Shared>,
}

impl ThreadGroup {
    /// Every rank's buffer, in rank order.
    fn exchange(&self, mine: Owned) -> Vec<Owned> {
        self.shared.slots.lock().unwrap()[self.rank] = Some(mine);
        self.shared.barrier.wait();
        let all: Vec<Owned> = self
            .shared
            .slots
            .lock()
            .unwrap()
            .iter()
            .map(|s| s.clone().unwrap())
            .collect();
        self.shared.barrier.wait();
        all
    }
}

fn owned(b: &Buffer<'_>) -> Owned {
    match b {
        Buffer::F32(s) => Owned::F32(s.to_vec()),
        Buffer::F64(s) => Owned::F64(s.to_vec()),
        Buffer::I32(s) => Owned::I32(s.to_vec()),
        Buffer::I64(s) => Owned::I64(s.to_vec()),
    }
}

fn owned_mut(b: &BufferMut<'_>) -> Owned {
    match b {
        BufferMut::F32(s) => Owned::F32(s.to_vec()),
        BufferMut::F64(s) => Owned::F64(s.to_vec()),
        BufferMut::I32(s) => Owned::I32(s.to_vec()),
        BufferMut::I64(s) => Owned::I64(s.to_vec()),
    }
}

/// The element types of `Owned`.
trait El: Copy + Default + std::ops::Add<Output = Self> {
    fn of(o: &Owned) -> &[Self];
}

macro_rules! el {
    ($t:ty, $v:ident) => {
        impl El for $t {
            fn of(o: &Owned) -> &[$t] {
                match o {
                    Owned::$v(v) => v,
                    _ => panic!("ranks passed buffers of different types"),
                }
            }
        }
    };
}
el!(f32, F32);
el!(f64, F64);
el!(i32, I32);
el!(i64, I64);

fn concat_into<T: El>(all: &[Owned], out: &mut [T]) {
    let v: Vec<T> = all.iter().flat_map(|o| T::of(o).iter().copied()).collect();
    out.copy_from_slice(&v);
}

fn sum_into<T: El>(all: &[Owned], out: &mut [T]) {
    for (i, x) in out.iter_mut().enumerate() {
        *x = all.iter().fold(T::default(), |acc, o| acc + T::of(o)[i]);
    }
}

fn root_into<T: El>(all: &[Owned], root: usize, out: &mut [T]) {
    out.copy_from_slice(T::of(&all[root]));
}

macro_rules! each {
    ($buf:expr, $f:ident ( $($arg:expr),* )) => {
        match $buf {
            BufferMut::F32(b) => $f($($arg,)* b),
            BufferMut::F64(b) => $f($($arg,)* b),
            BufferMut::I32(b) => $f($($arg,)* b),
            BufferMut::I64(b) => $f($($arg,)* b),
        }
    };
}

impl Collectives for ThreadGroup {
    fn this_rank(&self) -> usize {
        self.rank
    }

    fn num_ranks(&self) -> usize {
        self.shared.slots.lock().unwrap().len()
    }

    fn all_reduce_sum(&self, buf: BufferMut<'_>) -> Result<()> {
        let all = self.exchange(owned_mut(&buf));
        each!(buf, sum_into(&all));
        Ok(())
    }

    fn all_gather(&self, send: Buffer<'_>, counts: &[usize], recv: BufferMut<'_>) -> Result<()> {
        let all = self.exchange(owned(&send));
        assert_eq!(counts[self.rank], send.len(), "count of this rank");
        each!(recv, concat_into(&all));
        Ok(())
    }

    fn broadcast(&self, buf: BufferMut<'_>, root: usize) -> Result<()> {
        let all = self.exchange(owned_mut(&buf));
        each!(buf, root_into(&all, root));
        Ok(())
    }
}

/// Runs `f(comm)` on `size` threads, one rank each; their results in rank order.
fn on_ranks<T: Send>(size: usize, f: impl Fn(&ThreadGroup) -> T + Sync) -> Vec<T> {
    let shared = Arc::new(Shared {
        barrier: Barrier::new(size),
        slots: Mutex::new(vec![None; size]),
    });
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..size)
            .map(|rank| {
                let comm = ThreadGroup {
                    rank,
                    shared: shared.clone(),
                };
                let f = &f;
                s.spawn(move || f(&comm))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

// ---------------------------------------------------------------------------
// A small model: x [8, 5] -> tanh(x W1 + b1) W2 (f32, cross-entropy) plus an
// f64 term mean((a c + 0.3)^2), so that both dtypes are fused.

const N: usize = 8;

fn wave(n: usize, k: f64, scale: f64) -> Vec<f64> {
    (0..n).map(|i| scale * (0.37 * i as f64 + k).sin()).collect()
}

fn f32s(v: Vec<f64>, shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.into_iter().map(|x| x as f32).collect::<Vec<_>>(), shape).unwrap()
}

fn params() -> Vec<Variable> {
    vec![
        Variable::new(f32s(wave(20, 1.0, 0.8), &[5, 4])),
        Variable::new(f32s(wave(4, 2.0, 0.1), &[4])),
        Variable::new(f32s(wave(12, 3.0, 0.8), &[4, 3])),
        Variable::new(Tensor::vector(&[0.5f64, -0.25])),
    ]
}

/// The loss of `rows` of the batch, scaled so that its average over `size`
/// equal-weight shards is the whole batch's mean loss.
fn loss(p: &[Variable], rows: &[usize], size: usize) -> Result<Tensor> {
    let idx = Tensor::vector(&rows.iter().map(|&r| r as i64).collect::<Vec<_>>());
    let x = f32s(wave(N * 5, 0.5, 1.0), &[N, 5]).gather(&idx, 0)?;
    let y = Tensor::vector(&(0..N as i64).map(|i| i % 3).collect::<Vec<_>>()).gather(&idx, 0)?;
    let a = Tensor::vector(&wave(N, 4.0, 2.0)).gather(&idx, 0)?;
    let logits = x
        .matmul(&p[0].read())?
        .bias_add(&p[1].read())?
        .tanh()?
        .matmul(&p[2].read())?;
    let ce = Tensor::sparse_softmax_cross_entropy_with_logits(&y, &logits)?
        .mean_all()?
        .cast(DType::F64)?;
    // dense in c (a gather of c would make its gradient sparse)
    let q = a
        .reshape(&[rows.len(), 1])?
        .mul(&p[3].read())?
        .add_scalar(0.3)?
        .square()?
        .mean_all()?;
    ce.add(&q)?.mul_scalar((rows.len() * size) as f64 / N as f64)
}

fn shard(rank: usize, size: usize) -> Vec<usize> {
    (rank..N).step_by(size).collect()
}

fn grads(p: &[Variable], rows: &[usize], size: usize) -> Vec<Option<Gradient>> {
    let tape = GradientTape::new();
    let l = tape.record(|| loss(p, rows, size)).unwrap();
    tape.sparse_gradient(&l, p).unwrap()
}

fn values(g: &[Option<Gradient>]) -> Vec<Vec<f64>> {
    g.iter()
        .map(|g| g.as_ref().unwrap().to_dense().unwrap().to_vec_f64())
        .collect()
}

fn assert_close(got: &[Vec<f64>], want: &[Vec<f64>], rel: f64) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.len(), w.len(), "gradient {i}");
        let scale = w.iter().fold(0.0f64, |m, x| m.max(x.abs()));
        assert!(
            scale > 0.0,
            "gradient {i} is zero: the test would not see a wrong scale"
        );
        for (a, b) in g.iter().zip(w) {
            assert!((a - b).abs() <= rel * scale, "gradient {i}: {a} vs {b} (scale {scale})");
        }
    }
}

#[test]
fn averaged_shard_gradients_equal_the_whole_batch() {
    let whole = values(&grads(&params(), &(0..N).collect::<Vec<_>>(), 1));
    for size in [2, 3] {
        let per_rank = on_ranks(size, |comm| {
            let g = grads(&params(), &shard(comm.this_rank(), size), size);
            let avg = allreduce_gradients(comm, &g).unwrap();
            assert!(avg.iter().all(|g| !g.as_ref().unwrap().is_sparse()));
            let (sum, traffic) = allreduce_gradients_with(
                comm,
                &g,
                &AllreduceOptions {
                    average: false,
                    ..AllreduceOptions::default()
                },
            )
            .unwrap();
            (values(&avg), values(&sum), traffic)
        });
        for (avg, sum, traffic) in &per_rank {
            // f32 sums in another order: rounding only
            assert_close(avg, &whole, 1e-5);
            let scaled: Vec<Vec<f64>> = sum
                .iter()
                .map(|g| g.iter().map(|x| x / size as f64).collect())
                .collect();
            assert_close(&scaled, avg, 1e-6);
            // one f32 buffer of 20 + 4 + 12, one f64 buffer of 2; description + 2 calls
            assert_eq!(traffic.allreduce_bytes, 36 * 4 + 2 * 8);
            assert_eq!((traffic.allgather_bytes, traffic.calls), (0, 3));
            assert_eq!(avg, &per_rank[0].0, "every rank gets the same average");
        }
    }
}

fn slices(values: Vec<f32>, indices: Vec<i32>) -> Gradient {
    let n = indices.len();
    Gradient::Sparse(
        IndexedSlices::new(
            Tensor::from_vec(values, &[n, 2]).unwrap(),
            Tensor::vector(&indices),
            &[5, 2],
        )
        .unwrap(),
    )
}

/// Rank r's gradients: a dense f64 [3], None, sparse f32 rows (2, 0, 1 rows on ranks 0, 1, 2).
fn mixed(rank: usize) -> Vec<Option<Gradient>> {
    let r = rank as f64;
    let rows = match rank {
        0 => slices(vec![1.0, 2.0, 3.0, 4.0], vec![4, 1]),
        1 => slices(vec![], vec![]),
        _ => slices(vec![30.0, 60.0], vec![4]),
    };
    vec![
        Some(Gradient::Dense(Tensor::vector(&[r, 2.0 * r, 3.0]))),
        None,
        Some(rows),
    ]
}

#[test]
fn sparse_gradients_are_gathered_in_rank_order() {
    let out = on_ranks(3, |comm| {
        allreduce_gradients_with(comm, &mixed(comm.this_rank()), &AllreduceOptions::default()).unwrap()
    });
    let want_dense: Vec<f64> = (0..3)
        .map(|i| {
            (0..3)
                .map(|r| mixed(r)[0].as_ref().unwrap().to_dense().unwrap().to_vec_f64()[i])
                .sum::<f64>()
                / 3.0
        })
        .collect();
    for (g, traffic) in &out {
        assert_eq!(g[0].as_ref().unwrap().to_dense().unwrap().to_vec_f64(), want_dense);
        assert!(g[1].is_none());
        let s = g[2].as_ref().unwrap().as_sparse().expect("stays sparse");
        assert_eq!(s.indices().to_vec::<i64>().unwrap(), vec![4, 1, 4]);
        let third = |x: f32| x / 3.0;
        assert_eq!(
            s.values().to_vec::<f32>().unwrap(),
            [1.0f32, 2.0, 3.0, 4.0, 30.0, 60.0].map(third).to_vec()
        );
        assert_eq!(s.values().shape(), &[3, 2]);
        assert_eq!(s.dense_shape(), &[5, 2]);
        // f64 [3] reduced; 3 i64 indices and 6 f32 values gathered
        assert_eq!(traffic.allreduce_bytes, 24);
        assert_eq!(traffic.allgather_bytes, 3 * 8 + 6 * 4);
        assert_eq!(traffic.calls, 5); // description, dense f64, row counts, indices, f32 values
    }
    // sparse_as_dense: the same sum, through the fused all-reduce
    let dense = on_ranks(3, |comm| {
        let opts = AllreduceOptions {
            sparse_as_dense: true,
            ..AllreduceOptions::default()
        };
        allreduce_gradients_with(comm, &mixed(comm.this_rank()), &opts).unwrap()
    });
    let from_sparse = out[0].0[2].as_ref().unwrap().to_dense().unwrap().to_vec_f64();
    for (g, traffic) in &dense {
        assert!(!g[2].as_ref().unwrap().is_sparse());
        let got = g[2].as_ref().unwrap().to_dense().unwrap().to_vec_f64();
        for (a, b) in got.iter().zip(&from_sparse) {
            assert!((a - b).abs() <= 1e-6 * b.abs().max(1.0), "{a} vs {b}");
        }
        assert_eq!((traffic.allreduce_bytes, traffic.allgather_bytes), (24 + 10 * 4, 0));
    }
}

/// Runs `allreduce_gradients` on 2 ranks with rank-dependent lists; both errors.
fn both_fail(f: impl Fn(usize) -> Vec<Option<Gradient>> + Sync) -> Vec<String> {
    on_ranks(2, |comm| match allreduce_gradients(comm, &f(comm.this_rank())) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("rank {} got no error", comm.this_rank()),
    })
}

fn dense(t: Tensor) -> Option<Gradient> {
    Some(Gradient::Dense(t))
}

#[test]
fn ranks_that_disagree_all_get_an_error() {
    let shape = both_fail(|r| {
        vec![
            dense(Tensor::zeros(&[2], DType::F32)),
            dense(Tensor::zeros(&[3 + r], DType::F32)),
        ]
    });
    for msg in &shape {
        assert!(msg.contains("allreduce_gradients"), "{msg}");
        assert!(
            msg.contains("gradient 1 is a dense f32 [3] on rank 0 but a dense f32 [4] on rank 1"),
            "{msg}"
        );
    }
    assert_eq!(shape[0], shape[1]);
    let dtype = both_fail(|r| vec![dense(Tensor::zeros(&[2], if r == 0 { DType::F32 } else { DType::F64 }))]);
    assert!(
        dtype[1].contains("dense f32 [2] on rank 0 but a dense f64 [2] on rank 1"),
        "{}",
        dtype[1]
    );
    let none = both_fail(|r| {
        vec![if r == 0 {
            dense(Tensor::zeros(&[2], DType::F32))
        } else {
            None
        }]
    });
    assert!(none[0].contains("but None on rank 1"), "{}", none[0]);
    let count = both_fail(|r| vec![dense(Tensor::zeros(&[2], DType::F32)); 1 + r]);
    assert!(
        count[0].contains("rank 0 has 1 gradients, rank 1 has 2"),
        "{}",
        count[0]
    );
    let kind = both_fail(|r| {
        vec![Some(if r == 0 {
            Gradient::Dense(Tensor::zeros(&[5, 2], DType::F32))
        } else {
            slices(vec![1.0, 2.0], vec![0])
        })]
    });
    assert!(
        kind[0].contains("a dense f32 [5, 2] on rank 0 but a sparse f32 [5, 2] on rank 1"),
        "{}",
        kind[0]
    );
    // the same unsupported dtype everywhere: an error everywhere
    let ints = on_ranks(2, |comm| {
        allreduce_gradients(comm, &[dense(Tensor::vector(&[1i32]))]).unwrap_err()
    });
    for e in ints {
        assert!(
            matches!(
                e,
                Error::UnsupportedDType {
                    op: "allreduce_gradients",
                    dtype: DType::I32,
                    ..
                }
            ),
            "{e}"
        );
    }
}

#[test]
fn broadcast_copies_the_roots_variables() {
    let got = on_ranks(3, |comm| {
        let r = comm.this_rank();
        let w = Variable::new(Tensor::from_vec(vec![r as f32; 4], &[2, 2]).unwrap());
        let step = Variable::new(Tensor::scalar(10 * r as i64));
        let c = Variable::new(Tensor::vector(&[r as f64, -(r as f64)]));
        broadcast_variables(comm, &[w.clone(), step.clone(), c.clone()], 1).unwrap();
        let bad = Variable::new(Tensor::zeros(&[1 + r], DType::F32));
        let err = broadcast_variables(comm, &[bad], 0).unwrap_err().to_string();
        (
            w.read().to_vec_f64(),
            step.read().to_scalar::<i64>().unwrap(),
            c.read().to_vec_f64(),
            err,
        )
    });
    for (w, step, c, err) in got {
        assert_eq!((w, step, c), (vec![1.0; 4], 10, vec![1.0, -1.0]));
        assert!(
            err.contains("variable 0 is a f32 [1] on rank 0 but a f32 [2] on rank 1"),
            "{err}"
        );
    }
    let root = on_ranks(2, |comm| broadcast_variables(comm, &[], 2).unwrap_err().to_string());
    assert!(root[0].contains("root 2 out of range for 2 ranks"), "{}", root[0]);
}

#[test]
fn distributed_adam_takes_the_whole_batch_steps() {
    const STEPS: usize = 3;
    let reference = {
        let p = params();
        let mut opt = Adam::new(0.05);
        for _ in 0..STEPS {
            opt.apply(
                grads(&p, &(0..N).collect::<Vec<_>>(), 1)
                    .into_iter()
                    .zip(p.iter().cloned())
                    .collect(),
            )
            .unwrap();
        }
        p.iter().map(|v| v.read().to_vec_f64()).collect::<Vec<_>>()
    };
    let replicas = on_ranks(2, |comm| {
        let p = params();
        let mut opt = DistributedOptimizer::new(
            Adam::new(0.05),
            ThreadGroup {
                rank: comm.rank,
                shared: comm.shared.clone(),
            },
        );
        for _ in 0..STEPS {
            let tape = GradientTape::new();
            let l = tape.record(|| loss(&p, &shard(comm.this_rank(), 2), 2)).unwrap();
            opt.minimize(&tape, &l, &p).unwrap();
        }
        assert_eq!(opt.iterations(), STEPS as u64);
        assert_eq!(opt.last_traffic().allreduce_bytes, 36 * 4 + 2 * 8);
        p.iter().map(|v| v.read().to_vec_f64()).collect::<Vec<_>>()
    });
    assert_eq!(replicas[0], replicas[1], "the replicas stay identical");
    // weights moved by ~STEPS * lr; Adam's steps agree to rounding
    for (got, want) in replicas[0].iter().zip(&reference) {
        for (a, b) in got.iter().zip(want) {
            assert!((a - b).abs() <= 1e-5, "{a} vs {b}");
        }
    }
    assert_ne!(
        reference,
        values(&params().iter().map(|v| dense(v.read())).collect::<Vec<_>>())
    );
    // SGD wraps the same way
    let _ = DistributedOptimizer::new(Sgd::new(0.1), gradtape::distributed::SingleProcess);
}

/// Rank 0 of a group of `size` whose peers echo its buffers, except that
/// at the `lie_at`-th all-gather (counting from 0) every peer reports
/// `lie` for each of its words (a corrupt or hostile peer).
struct Liar {
    size: usize,
    lie_at: usize,
    lie: i64,
    calls: std::cell::Cell<usize>,
}

impl Liar {
    fn new(size: usize, lie_at: usize, lie: i64) -> Liar {
        Liar {
            size,
            lie_at,
            lie,
            calls: std::cell::Cell::new(0),
        }
    }
}

impl Collectives for Liar {
    fn this_rank(&self) -> usize {
        0
    }

    fn num_ranks(&self) -> usize {
        self.size
    }

    fn all_reduce_sum(&self, _buf: BufferMut<'_>) -> Result<()> {
        Ok(())
    }

    fn all_gather(&self, send: Buffer<'_>, counts: &[usize], recv: BufferMut<'_>) -> Result<()> {
        let call = self.calls.get();
        self.calls.set(call + 1);
        assert_eq!(counts.len(), self.size);
        assert_eq!(recv.len(), counts.iter().sum::<usize>(), "recv holds the counts' sum");
        let (Buffer::I64(s), BufferMut::I64(r)) = (send, recv) else {
            return Ok(());
        };
        r[..s.len()].copy_from_slice(s);
        for chunk in r[s.len()..].chunks_mut(s.len().max(1)) {
            if call == self.lie_at {
                chunk.fill(self.lie);
            } else {
                chunk.copy_from_slice(&s[..chunk.len()]);
            }
        }
        Ok(())
    }

    fn broadcast(&self, _buf: BufferMut<'_>, _root: usize) -> Result<()> {
        Ok(())
    }
}

/// A peer's description length or sparse row count sized buffers
/// unchecked (`vec![0; n]`: an abort for 2^40, a capacity-overflow panic
/// for i64::MAX); a group of zero ranks scaled the gradients by 1/0.
/// Each is now an error, the same on every rank.
#[test]
fn peers_lengths_and_group_sizes_are_validated() {
    let g = vec![dense(Tensor::vector(&[1.0f32, 2.0]))];
    for lie in [1i64 << 40, i64::MAX, -1] {
        // the description headers differ, with a bogus length
        let e = allreduce_gradients(&Liar::new(3, 0, lie), &g).unwrap_err().to_string();
        assert!(e.contains("allreduce_gradients") && e.contains("words"), "{lie}: {e}");
        let v = Variable::new(Tensor::scalar(1.0f64));
        let e = broadcast_variables(&Liar::new(2, 0, lie), &[v], 0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("broadcast_variables"), "{lie}: {e}");
    }
    // the descriptions agree, then a peer reports a bogus sparse row count
    let sparse = vec![Some(slices(vec![1.0, 2.0], vec![3]))];
    for lie in [i64::MAX, -3] {
        let r = allreduce_gradients(&Liar::new(2, 1, lie), &sparse);
        let e = r.as_ref().unwrap_err().to_string();
        assert!(e.contains("allreduce_gradients"), "{lie}: {e}");
    }
    // (an honest peer: the same gradients twice over)
    let avg = allreduce_gradients(&Liar::new(2, usize::MAX, 0), &sparse).unwrap();
    assert_eq!(avg[0].as_ref().unwrap().to_dense().unwrap().shape(), &[5, 2]);
    // no ranks at all, or this rank outside the group
    let none = Liar::new(0, usize::MAX, 0);
    let e = allreduce_gradients(&none, &g).unwrap_err().to_string();
    assert!(e.contains("0 ranks"), "{e}");
    let v = Variable::new(Tensor::scalar(1.0f32));
    assert!(broadcast_variables(&none, std::slice::from_ref(&v), 0).is_err());
    let mut opt = DistributedOptimizer::new(Sgd::new(1.0), none);
    let e = opt.apply_gradients([(Some(Tensor::scalar(1.0f32)), &v)]).unwrap_err();
    assert!(e.to_string().contains("0 ranks"), "{e}");
    assert_eq!(v.read().to_scalar::<f32>().unwrap(), 1.0, "not scaled by infinity");
    struct Outside(Liar);
    impl Collectives for Outside {
        fn this_rank(&self) -> usize {
            1
        }
        fn num_ranks(&self) -> usize {
            1
        }
        fn all_reduce_sum(&self, b: BufferMut<'_>) -> Result<()> {
            self.0.all_reduce_sum(b)
        }
        fn all_gather(&self, s: Buffer<'_>, c: &[usize], r: BufferMut<'_>) -> Result<()> {
            self.0.all_gather(s, c, r)
        }
        fn broadcast(&self, b: BufferMut<'_>, root: usize) -> Result<()> {
            self.0.broadcast(b, root)
        }
    }
    let e = allreduce_gradients(&Outside(Liar::new(1, usize::MAX, 0)), &g).unwrap_err();
    assert!(e.to_string().contains("rank 1 of 1 ranks"), "{e}");
}
