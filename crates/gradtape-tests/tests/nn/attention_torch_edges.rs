//! `scaled_dot_product_attention` at the edges of its argument space,
//! against PyTorch 2.15's `F.scaled_dot_product_attention` in f64
//! (`tests/reference/attention_torch_edges.py` printed the sums below):
//! `causal` with fewer queries than keys and more (PyTorch's top-left
//! band: query `i` sees keys `j <= i`, whatever `tk`), masks that
//! broadcast from lower ranks (bool `[tk]`, which PyTorch itself refuses
//! at rank 1 and was given as `[1, tk]`; bool `[b, 1, tq, 1]` hiding a
//! whole row, which gives zeros; additive `[1, h, 1, tk]`), `scale` 0
//! (uniform weights: the mean of the values, no gradient to `q` or
//! `k`), a negative `scale`, inputs of rank 3 and 5, and no keys at all
//! (zeros). Each case eagerly and inside a traced `function` (the
//! gradients taken inside it), in f64 to `1e-12` and in f32 to `2e-5`:
//! the values a bad-input campaign's accepted calls give are right, not
//! only free of panics.

use gradtape::{function, DType, GradientTape, Result, Tensor};

use super::sums_util::{close_sums, init, sin_weighted, wsum, Sums};

struct Case {
    name: &'static str,
    shapes: [&'static [usize]; 3],
    mask: Option<Tensor>,
    causal: bool,
    scale: Option<f64>,
    /// out, dq, dk, dv: PyTorch's sums
    want: [Sums; 4],
}

/// A case without its sums: name, shapes, mask, causal, scale.
type Spec = (&'static str, [&'static [usize]; 3], Option<Tensor>, bool, Option<f64>);

fn cases() -> Vec<Case> {
    let qkv: [&'static [usize]; 3] = [&[2, 2, 3, 4], &[2, 2, 5, 4], &[2, 2, 5, 3]];
    let want: Vec<[Sums; 4]> = vec![
        // causal, tq 3 < tk 5 (top-left)
        [
            (6.5792984950847995, 1.989453168582828),
            (-1.472248799843665, 0.05143683362600793),
            (0.0, 0.3926539350999649),
            (19.1730354298387, 8.175854301240125),
        ],
        // causal, tq 5 > tk 3 (top-left)
        [
            (2.3625415130508847, -2.5086901322495527),
            (2.8871700523763835, 3.052007537465837),
            (2.220446049250313e-16, -0.1407966380224428),
            (0.5376729129856671, 5.60433886222774),
        ],
        // bool mask [5] (as [1, 5])
        [
            (0.5669077991135546, 0.15745631556336967),
            (-4.811162947076918, -2.1291761784105967),
            (6.245004513516506e-17, -0.6149373251025305),
            (19.173035429838695, 4.378240928633316),
        ],
        // bool mask [2, 1, 3, 1]
        [
            (-3.4456790987279917, -2.3885583238759653),
            (-1.6168702186556696, -0.6256504704371737),
            (0.0, -0.6886230913200073),
            (16.63129792012794, 5.32203642513476),
        ],
        // additive mask [1, 2, 1, 5]
        [
            (-4.398519681207924, -0.09245165694390445),
            (-2.784620693236916, -1.5184599596973998),
            (-2.220446049250313e-16, -0.6436500730317949),
            (19.173035429838695, 2.924431679452257),
        ],
        // scale 0
        [
            (-3.1643175514580557, -2.0728633027239822),
            (0.0, 0.0),
            (0.0, 0.0),
            (19.1730354298387, 4.499854919745932),
        ],
        // scale -0.7, causal
        [
            (8.082957720770025, 3.4165145119493827),
            (0.8838219408929737, -1.0736223769047903),
            (4.440892098500626e-16, -0.598588612619317),
            (19.1730354298387, 8.06957617689262),
        ],
        // rank 3
        [
            (1.2204913359633054, 2.2851396169155374),
            (1.2950943363858372, -0.3352912777820962),
            (4.85722573273506e-16, -0.022306143375005957),
            (17.021724870552532, 11.626666922968887),
        ],
        // rank 5
        [
            (-8.414426663855389, -2.35443688134081),
            (-13.749760869335045, -2.378987424218084),
            (1.3322676295501878e-15, -0.5833376708035868),
            (0.5376729129856657, 7.884005885304317),
        ],
        // no keys
        [(0.0, 0.0), (0.0, 0.0), (0.0, 0.0), (0.0, 0.0)],
    ];
    // batch 1's row 1 sees no key
    let row = Tensor::from_vec(vec![true, true, true, true, false, true], &[2, 1, 3, 1]).unwrap();
    let specs: Vec<Spec> = vec![
        ("causal, tq 3 < tk 5", qkv, None, true, None),
        (
            "causal, tq 5 > tk 3",
            [&[2, 2, 5, 4], &[2, 2, 3, 4], &[2, 2, 3, 3]],
            None,
            true,
            None,
        ),
        (
            "bool mask [5]",
            qkv,
            Some(Tensor::from_vec(vec![true, false, true, false, true], &[5]).unwrap()),
            false,
            None,
        ),
        ("bool mask [2, 1, 3, 1]", qkv, Some(row), false, None),
        (
            "additive mask [1, 2, 1, 5]",
            qkv,
            Some(init(&[1, 2, 1, 5], 4.0, 2.0)),
            false,
            None,
        ),
        ("scale 0", qkv, None, false, Some(0.0)),
        ("scale -0.7, causal", qkv, None, true, Some(-0.7)),
        ("rank 3", [&[3, 4, 6], &[3, 6, 6], &[3, 6, 2]], None, true, None),
        (
            "rank 5",
            [&[2, 1, 2, 3, 4], &[2, 1, 2, 4, 4], &[2, 1, 2, 4, 5]],
            None,
            false,
            None,
        ),
        (
            "no keys",
            [&[1, 2, 3, 4], &[1, 2, 0, 4], &[1, 2, 0, 3]],
            None,
            false,
            None,
        ),
    ];
    assert_eq!(specs.len(), want.len());
    specs
        .into_iter()
        .zip(want)
        .map(|((name, shapes, mask, causal, scale), want)| Case {
            name,
            shapes,
            mask,
            causal,
            scale,
            want,
        })
        .collect()
}

/// The output and the gradients of `sin_weighted` w.r.t. q, k, v.
fn out_and_grads(x: &[Tensor], mask: Option<&Tensor>, causal: bool, scale: Option<f64>) -> Result<Vec<Tensor>> {
    let tape = GradientTape::new();
    let mut o = None;
    let loss = tape.record(|| {
        tape.watch(x);
        let y = x[0].scaled_dot_product_attention(&x[1], &x[2], mask, causal, scale)?;
        o = Some(y.clone());
        sin_weighted(&y)
    })?;
    let g = tape.gradient(&loss, x)?;
    let mut out = vec![o.expect("recorded")];
    out.extend(x.iter().zip(g).map(|(t, g)| g.unwrap_or_else(|| t.zeros_like())));
    Ok(out)
}

#[test]
fn edges_match_pytorch_eager_and_traced() -> Result<()> {
    for c in cases() {
        let [qs, ks, vs] = c.shapes;
        for (dtype, tol) in [(DType::F64, 1e-12), (DType::F32, 2e-5)] {
            let x = vec![
                init(qs, 1.0, 0.8).cast(dtype)?,
                init(ks, 2.0, 0.9).cast(dtype)?,
                init(vs, 3.0, 1.0).cast(dtype)?,
            ];
            let mask = match &c.mask {
                Some(m) if m.dtype().is_float() => Some(m.cast(dtype)?),
                m => m.clone(),
            };
            let eager = out_and_grads(&x, mask.as_ref(), c.causal, c.scale)?;
            let traced = {
                let (mask, causal, scale) = (mask.clone(), c.causal, c.scale);
                function(move |x: &Vec<Tensor>| out_and_grads(x, mask.as_ref(), causal, scale))
            };
            let traced = traced.call(&x)?;
            for (how, got) in [("eager", &eager), ("traced", &traced)] {
                assert_eq!(
                    got[0].shape(),
                    &[&qs[..qs.len() - 1], &vs[vs.len() - 1..]].concat()[..],
                    "{}",
                    c.name
                );
                for (what, (g, w)) in ["out", "dq", "dk", "dv"].iter().zip(got.iter().zip(c.want)) {
                    close_sums(wsum(g), w, tol, &format!("{} ({dtype}, {how}): {what}", c.name));
                }
            }
        }
    }
    Ok(())
}
