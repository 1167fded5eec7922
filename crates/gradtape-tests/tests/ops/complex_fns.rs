//! The holomorphic functions of complex tensors (`sqrt`, `rsqrt`,
//! `reciprocal`, `sin`, `cos`, `tan`, `sinh`, `cosh`, `tanh`, `sigmoid`,
//! `exp`, `log`, `square`, `pow_scalar`, `pow`): values, reverse-mode
//! gradients (seeded with a complex cotangent) and forward-mode tangents
//! against TensorFlow 2.21, forward mode through non-holomorphic ops, and
//! the consistency of forward and reverse mode on complex inputs.
//!
//! Every reference number below was computed with TensorFlow 2.21
//! (tensorflow-cpu, `tf.GradientTape.gradient(..., output_gradients=w)` and
//! `tf.autodiff.ForwardAccumulator(z, v)`) on the inputs written here.

use gradtape::{Complex, DType, Error, ForwardAccumulator, GradientOptions, GradientTape, Result, Tensor};

type C = Complex<f64>;
type F = fn(&Tensor) -> Result<Tensor>;

fn c(re: f64, im: f64) -> C {
    C::new(re, im)
}

const Z: [(f64, f64); 4] = [(0.3, 0.8), (-1.2, 0.5), (2.0, -1.5), (-0.7, -0.9)];
/// the cotangent seeding reverse mode
const W: [(f64, f64); 4] = [(1.0, -0.5), (0.25, 2.0), (-1.5, 0.3), (0.6, 0.6)];
/// the tangent seeding forward mode
const V: [(f64, f64); 4] = [(0.5, 1.0), (-1.0, 0.2), (0.3, -0.7), (1.1, 0.4)];
/// the exponents of `pow`
const P: [(f64, f64); 4] = [(0.5, 0.2), (2.0, -1.0), (-1.5, 0.0), (0.3, 0.7)];

fn ct(v: &[(f64, f64)]) -> Tensor {
    Tensor::vector(&v.iter().map(|&(r, i)| c(r, i)).collect::<Vec<_>>())
}

#[track_caller]
fn close(what: &str, got: &Tensor, want: &[C], tol: f64) {
    let g = got.to_vec::<C>().unwrap();
    assert_eq!(g.len(), want.len(), "{what}: length");
    for (i, (a, b)) in g.iter().zip(want).enumerate() {
        let err = (a - b).norm();
        assert!(err <= tol * (1.0 + b.norm()), "{what}[{i}]: got {a}, TensorFlow {b}");
    }
}

/// (op, f, value, gradient seeded with W, tangent seeded with V)
#[allow(clippy::type_complexity)]
fn table() -> Vec<(&'static str, F, Vec<C>, Vec<C>, Vec<C>)> {
    vec![
        (
            "sqrt",
            |x| x.sqrt(),
            vec![
                c(0.7597369197728095, 0.5264980410845578),
                c(0.22360679774997896, 1.118033988749895),
                c(1.5, -0.5),
                c(0.4691350685565608, -0.9592120268999805),
            ],
            vec![
                c(0.5986572400999515, 0.08580847198160008),
                c(-0.838525491562421, 0.27950849718747367),
                c(-0.42, 0.24),
                c(0.37582298232721867, -0.12894777791780795),
            ],
            vec![
                c(0.5304108752689212, 0.2905475664746909),
                c(1.1935260352150349e-17, 0.4472135954999579),
                c(0.16, -0.17999999999999997),
                c(0.058045350626950945, 0.5449982650277447),
            ],
        ),
        (
            "rsqrt",
            |x| x.rsqrt(),
            vec![
                c(0.8892048065746424, -0.6162193472505212),
                c(0.17200522903844537, -0.860026145192227),
                c(0.6, 0.2),
                c(0.41145867401568453, 0.8412846004083777),
            ],
            vec![
                c(-0.1519868417050758, -0.691326484485536),
                c(-0.5127078942492125, 0.44655203692673334),
                c(0.07679999999999995, -0.17759999999999998),
                c(0.2916377598116002, 0.19075172273233168),
            ],
            vec![
                c(-0.5363853640553823, 0.4618690825653833),
                c(-0.13231171464495803, 0.3175481151478993),
                c(-0.09439999999999998, 0.019200000000000002),
                c(0.4085616799721814, 0.2532753615039734),
            ],
        ),
        (
            "reciprocal",
            |x| x.reciprocal(),
            vec![
                c(0.4109589041095889, -1.095890410958904),
                c(-0.7100591715976331, -0.2958579881656805),
                c(0.32, 0.24),
                c(-0.5384615384615384, 0.6923076923076924),
            ],
            vec![
                c(0.581722649652843, -1.416776130606117),
                c(-0.94446973145198, -0.7282658170232134),
                c(0.021120000000000014, -0.24384),
                c(0.5609467455621302, -0.33372781065088747),
            ],
            vec![
                c(-0.3846875586413958, 1.4824544942765994),
                c(0.5006827492034592, 0.33682294037323623),
                c(-0.12096, -0.01471999999999999),
                c(-0.08994082840236675, 0.8958579881656806),
            ],
        ),
        (
            "sin",
            |x| x.sin(),
            vec![
                c(0.39523905172810525, 0.8484400509945718),
                c(-1.0509914739238664, 0.18882292476705054),
                c(2.139040009980677, 0.8860929093625314),
                c(-0.9232195968456317, -0.7851232977747521),
            ],
            vec![
                c(1.4089270377333927, -0.3763969396251235),
                c(1.0735133876288536, 0.6957877272250004),
                c(2.0492662283229888, 2.610538148371793),
                c(0.2608708168006406, 1.054431093936474),
            ],
            vec![
                c(0.9013034664116402, 1.1464737743401345),
                c(-0.5057402510886168, -0.4039603897058497),
                c(1.0616194847633875, 1.2661079726057425),
                c(1.4702135105542995, -0.2889962837954759),
            ],
        ),
        (
            "cos",
            |x| x.cos(),
            vec![
                c(1.2777004060367636, -0.2624532633932583),
                c(0.4086040126417758, 0.48568119223420486),
                c(-0.9789478196465577, 1.936148329510507),
                c(1.0960849256142622, -0.6613002309465279),
            ],
            vec![
                c(0.02898097376918063, 1.0460595768586245),
                c(-0.11489798105313448, 2.1491886790394954),
                c(2.9427321421622556, -1.9708513670380001),
                c(1.0250057367722303, 0.08285777944252781),
            ],
            vec![
                c(0.6508205251305191, -0.8194590772253911),
                c(-1.0132268889704563, 0.3990212195518238),
                c(-1.261977039547975, 1.2315001341777143),
                c(0.7014922374202942, 1.23292346629048),
            ],
        ),
        (
            "tan",
            |x| x.tan(),
            vec![
                c(0.1659346594296767, 0.6981215155427242),
                c(-0.8383693025074906, 1.4586325848541404),
                c(-0.08039101531016819, -1.0641443991765371),
                c(-0.30067663603520245, -0.8977049164996321),
            ],
            vec![
                c(0.42431810481426124, -0.5017654422124098),
                c(-4.997677613668301, -0.23805546903331865),
                c(0.2402394696461484, 0.21886076997243423),
                c(0.49462206674434633, -0.15318327992454533),
            ],
            vec![
                c(0.038395218523963104, 0.6560032166584846),
                c(0.9138950433229212, 2.3607963795154534),
                c(0.08198453207414502, 0.13948700008119375),
                c(0.09705043902852034, 0.7076344967197511),
            ],
        ),
        (
            "sinh",
            |x| x.sinh(),
            vec![
                c(0.21216133157699188, 0.7498799501621949),
                c(-1.324676963357129, 0.8680745205911871),
                c(0.2565539560904818, -3.752771340479298),
                c(-0.4715431908311155, -0.9832076582410879),
            ],
            vec![
                c(0.6190696126791648, -0.5825966654731047),
                c(-1.0500987087730245, 3.3589180837773602),
                c(-1.4845233151523596, -5.346824452316143),
                c(0.8246667555721859, 0.11160392334530034),
            ],
            vec![
                c(0.1456976908594691, 0.8375190999859827),
                c(-1.444264886809449, 1.0414742736154294),
                c(-2.4526043931640324, -1.2716215589015232),
                c(0.620560511598734, 0.9657311558471406),
            ],
        ),
        (
            "cosh",
            |x| x.cosh(),
            vec![
                c(0.7282943563325738, 0.2184494873068178),
                c(1.5889997514735912, -0.7236743233207111),
                c(0.26612719531354573, -3.6177750739401375),
                c(0.7802255657645719, 0.594219026855738),
            ],
            vec![
                c(-0.16277864350410556, -0.8559606159506908),
                c(1.4049798003430918, -2.8663725568620544),
                c(-1.5106623362795122, -5.552190823891802),
                c(-0.8728505094433221, 0.3069986804459835),
            ],
            vec![
                c(-0.6437992843736989, 0.5871013066580894),
                c(1.1510620592388916, -1.1330099132626128),
                c(-2.549973751508364, -1.3054191714071266),
                c(-0.12541444661779194, -1.270145700397643),
            ],
        ),
        (
            "tanh",
            |x| x.tanh(),
            vec![
                c(0.5506118398073958, 0.8644843538560951),
                c(-0.8965073904275905, 0.13800829186292585),
                c(1.036920282100185, -0.0053620609220030565),
                c(-0.9899179155588566, -0.5062377024310765),
            ],
            vec![
                c(1.9201551204873173, 0.2299107411598721),
                c(0.5487320112645122, 0.36877884826556817),
                c(0.11609839743442335, -0.005872386748373492),
                c(-0.4355570463104689, 0.7671640044924334),
            ],
            vec![
                c(1.674070541085777, 0.9681644793644928),
                c(-0.26481096896979467, -0.20438674968447498),
                c(-0.014768434306584352, 0.0559584616477064),
                c(0.7048800619344349, -0.9919586438420057),
            ],
        ),
        (
            "sigmoid",
            |x| x.sigmoid(),
            vec![
                c(0.5874030964705703, 0.20589479573559277),
                c(0.219247089941936, 0.08917095799549693),
                c(0.9731181720799196, -0.1301216345961171),
                c(0.297902759891186, -0.20868917451665525),
            ],
            vec![
                c(0.30274920833282404, -0.10638499743024607),
                c(0.14492233961054546, 0.3457410235125761),
                c(-0.02769850661168185, 0.19761598023581473),
                c(0.10101411880802283, 0.2022353337129892),
            ],
            vec![
                c(0.1783683682081116, 0.2667575229438913),
                c(-0.1891432656237238, -0.014244159251049646),
                c(0.0991153243827489, 0.006774161418494969),
                c(0.31171906977924985, 0.008297037177451477),
            ],
        ),
        (
            "exp",
            |x| x.exp(),
            vec![
                c(0.9404556879095657, 0.9683294374690128),
                c(0.2643227881164622, 0.14440019727047596),
                c(0.5226811514040275, -7.370546414419436),
                c(0.3086823749334563, -0.38898863138534984),
            ],
            vec![
                c(0.4562909691750593, -1.4385572814237957),
                c(0.3548810915700675, 0.4925455269153054),
                c(-2.9951856514318718, -10.899015276207944),
                c(-0.048183753871136104, 0.41860260379128367),
            ],
            vec![
                c(-0.49810159351422995, 1.4246204066440722),
                c(-0.2932028275705574, -0.0915356396471835),
                c(-5.0025781446723965, -2.5770407303086498),
                c(0.49514606498094194, -0.3044145445505023),
            ],
        ),
        (
            "log",
            |x| x.log(),
            vec![
                c(-0.15735537241985015, 1.2120256565243244),
                c(0.26236426446749106, 2.746801533890032),
                c(0.9162907318741551, -0.6435011087932845),
                c(0.13118213223374559, -2.231839495645583),
            ],
            vec![
                c(0.9589041095890409, 0.8904109589041096),
                c(-0.7692307692307693, -1.346153846153846),
                c(-0.408, 0.45599999999999996),
                c(0.09230769230769237, -0.7384615384615385),
            ],
            vec![
                c(1.3013698630136985, -0.13698630136986312),
                c(0.7692307692307692, 0.15384615384615385),
                c(0.264, -0.15199999999999997),
                c(-0.8692307692307693, 0.5461538461538463),
            ],
        ),
        (
            "square",
            |x| x.square(),
            vec![
                c(-0.5500000000000002, 0.48),
                c(1.19, -1.2),
                c(1.75, -6.0),
                c(-0.3200000000000001, 1.26),
            ],
            vec![
                c(-0.20000000000000007, -1.9000000000000001),
                c(1.4, -5.05),
                c(-6.9, -3.3),
                c(-1.92, 0.2400000000000001),
            ],
            vec![
                c(-1.3, 1.4),
                c(2.1999999999999997, -1.48),
                c(-0.8999999999999997, -3.6999999999999997),
                c(-0.82, -2.54),
            ],
        ),
        (
            "pow_scalar",
            |x| x.pow_scalar(2.5),
            vec![
                c(-0.670574365595633, 0.07509979889444196),
                c(1.6077328758223484, 1.0621322893124006),
                c(-0.37499999999999906, -9.875000000000002),
                c(1.0584839319558765, 0.8980580349892598),
            ],
            vec![
                c(-1.440367077519027, -1.6727506741892837),
                c(-6.666277657921247, -3.3680773911090585),
                c(-10.875, -10.500000000000002),
                c(-1.4136877726057402, -2.161368343992985),
            ],
            vec![
                c(-2.1559440665287917, 0.47398029284001075),
                c(2.6832815729997477, 2.6609208932247492),
                c(-4.000000000000001, -6.375),
                c(-3.526361630677913, -0.5063115150946007),
            ],
        ),
    ]
}

#[test]
fn values_gradients_and_tangents_match_tensorflow() -> Result<()> {
    let z = ct(&Z);
    for (name, f, value, grad, tangent) in table() {
        let tape = GradientTape::new();
        let y = tape.record(|| {
            tape.watch(&z);
            f(&z)
        })?;
        close(&format!("{name} value"), &y, &value, 1e-13);
        let g = tape
            .gradient_with(&y, &z, GradientOptions::default().output_gradients(vec![ct(&W)]))?
            .unwrap();
        close(&format!("{name} gradient"), &g, &grad, 1e-12);
        let acc = ForwardAccumulator::new();
        acc.watch(&z, &ct(&V))?;
        let y = acc.record(|| f(&z))?;
        close(&format!("{name} tangent"), &acc.jvp(&y)?.unwrap(), &tangent, 1e-12);
    }
    Ok(())
}

#[test]
fn complex_powers_match_tensorflow() -> Result<()> {
    let (z, p) = (ct(&Z), ct(&P));
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(&z);
        tape.watch(&p);
        z.pow(&p)
    })?;
    close(
        "pow value",
        &y,
        &[
            c(0.6088998975405684, 0.3941987461621912),
            c(13.067289212502125, -22.88349316232835),
            c(0.14399999999999996, 0.208),
            c(4.1560126193985525, -2.709391200149277),
        ],
        1e-13,
    );
    let g = tape.gradient_with(
        &y,
        &[&z, &p][..],
        GradientOptions::default().output_gradients(vec![ct(&W)]),
    )?;
    close(
        "pow gradient (base)",
        g[0].as_ref().unwrap(),
        &[
            c(0.5002722176157235, -0.1048889275518447),
            c(76.69915148257846, -49.63359595910899),
            c(-0.05414399999999997, -0.22579199999999996),
            c(-1.2579465380630375, -2.514776536700925),
        ],
        1e-12,
    );
    close(
        "pow gradient (exponent)",
        g[1].as_ref().unwrap(),
        &[
            c(-0.9115791680444058, -0.3891766754333117),
            c(76.35007936187564, 125.09724788355925),
            c(-0.3693138502592448, 0.2266246976510514),
            c(-9.079625109426457, 2.477547078252832),
        ],
        1e-12,
    );
    // forward: tangent V on the base and W on the exponent
    let acc = ForwardAccumulator::new();
    acc.watch(&z, &ct(&V))?;
    acc.watch(&p, &ct(&W))?;
    let y = acc.record(|| z.pow(&p))?;
    close(
        "pow tangent",
        &acc.jvp(&y)?.unwrap(),
        &[
            c(0.10167825708147787, 1.3468438123064215),
            c(-31.655415617782054, 95.28499941881634),
            c(-0.5325164377973997, -0.11668424003972247),
            c(-1.399725739826764, -9.185105302263047),
        ],
        1e-12,
    );
    Ok(())
}

#[test]
fn complex64_values_match_tensorflow() -> Result<()> {
    let z = ct(&Z).cast(DType::C64)?;
    let cases: [(&str, F, &[C]); 3] = [
        (
            "sqrt",
            |x| x.sqrt(),
            &[
                c(0.7597368955612183, 0.5264980792999268),
                c(0.22360679507255554, 1.1180340051651),
                c(1.5, -0.5),
                c(0.4691350758075714, -0.9592120051383972),
            ],
        ),
        (
            "tanh",
            |x| x.tanh(),
            &[
                c(0.5506118535995483, 0.8644843101501465),
                c(-0.8965074419975281, 0.13800829648971558),
                c(1.0369203090667725, -0.005362060386687517),
                c(-0.9899179339408875, -0.5062377452850342),
            ],
        ),
        (
            "sin",
            |x| x.sin(),
            &[
                c(0.39523905515670776, 0.8484401106834412),
                c(-1.050991415977478, 0.1888228952884674),
                c(2.139039993286133, 0.8860929012298584),
                c(-0.9232195615768433, -0.7851232886314392),
            ],
        ),
    ];
    for (name, f, want) in cases {
        let y = f(&z)?;
        assert_eq!(y.dtype(), DType::C64, "{name}");
        close(name, &y.cast(DType::C128)?, want, 3e-7);
    }
    Ok(())
}

#[test]
fn special_values_match_tensorflow() -> Result<()> {
    let t = |v: &[C]| Tensor::vector(v);
    let sqrt = t(&[c(0.0, 0.0), c(-4.0, 0.0), c(-4.0, -0.0), c(1e300, 1e300)]).sqrt()?;
    close(
        "sqrt",
        &sqrt,
        &[
            c(0.0, 0.0),
            c(0.0, 2.0),
            c(0.0, -2.0),
            c(1.09868411346781e+150, 4.550898605622274e+149),
        ],
        1e-15,
    );
    // the sign of a zero imaginary part picks the side of the branch cut
    assert!(sqrt.to_vec::<C>()?[2].im < 0.0);
    let tanh = t(&[c(400.0, 1.0), c(-30.0, 0.5), c(0.5, std::f64::consts::FRAC_PI_2)]).tanh()?;
    close(
        "tanh",
        &tanh,
        &[
            c(1.0, 0.0),
            c(-1.0, 1.473669946993437e-26),
            c(2.1639534137386525, 2.254999940412124e-16),
        ],
        1e-14,
    );
    let im = tanh.to_vec::<C>()?[1].im;
    assert!(
        (im - 1.473669946993437e-26).abs() < 1e-38,
        "tanh(-30 + 0.5i) imaginary part {im}"
    );
    let pow = t(&[c(0.0, 0.0), c(0.0, 0.0), c(-4.0, 0.0)]).pow(&t(&[c(2.0, 1.0), c(3.0, 0.0), c(0.5, 0.0)]))?;
    close(
        "pow",
        &pow,
        &[c(0.0, -0.0), c(0.0, -0.0), c(1.2246467991473532e-16, 2.0)],
        1e-15,
    );
    // 0^0 is NaN (exp(0 · ln 0)), as TensorFlow
    let p00 = t(&[c(0.0, 0.0)]).pow(&t(&[c(0.0, 0.0)]))?.to_vec::<C>()?[0];
    assert!(p00.re.is_nan() && p00.im.is_nan());
    let sinh = t(&[c(800.0, 1.0), c(3.0, 0.0)]).sinh()?.to_vec::<C>()?;
    assert!(sinh[0].re == f64::INFINITY && sinh[0].im == f64::INFINITY);
    assert_eq!(sinh[1], c(10.017874927409903, 0.0));
    close(
        "cosh",
        &t(&[c(-3.0, 0.0), c(0.0, 0.0)]).cosh()?,
        &[c(10.067661995777765, -0.0), c(1.0, 0.0)],
        1e-15,
    );
    Ok(())
}

/// Forward mode through non-holomorphic ops (`abs`, `angle`, `real`,
/// `imag`, `conj`, `complex`, `cast`) and through a holomorphic chain,
/// against `tf.autodiff.ForwardAccumulator`.
#[test]
fn forward_mode_through_composites_matches_tensorflow() -> Result<()> {
    let z = ct(&Z);
    let nonholo = |x: &Tensor| -> Result<Tensor> {
        Tensor::complex(&x.abs()?.mul(&x.angle()?)?, &x.real()?)?
            .mul(&x.conj()?)?
            .add(&x.imag()?.cast(DType::C128)?)
    };
    let chain = |x: &Tensor| -> Result<Tensor> { x.sin()?.mul(&x.sqrt()?)?.tanh()?.div(&x.cosh()?) };
    let acc = ForwardAccumulator::new();
    acc.watch(&z, &ct(&V))?;
    let (y1, y2) = acc.record(|| Ok((nonholo(&z)?, chain(&z)?)))?;
    close(
        "non-holomorphic value",
        &y1,
        &[
            c(1.350666552462943, -0.7384441399011814),
            c(-4.385010392868449, -0.3454209970285207),
            c(-7.717505543966421, 1.5868708420251836),
            c(1.5112819819905243, -1.8002196911306745),
        ],
        1e-13,
    );
    close(
        "non-holomorphic tangent",
        &acc.jvp(&y1)?.unwrap(),
        &[
            c(2.5869573321010373, -1.7200344939772743),
            c(-7.647003834725079, 0.2124308342435759),
            c(-4.642047295202098, -1.1331930380935988),
            c(-5.653400343288951, 2.0290449164464626),
        ],
        1e-12,
    );
    close(
        "chain value",
        &y2,
        &[
            c(0.00025280847185615716, 1.4967605388764273),
            c(-0.4419918112945522, -0.8171978437305586),
            c(0.020016633730749633, 0.2746174735438659),
            c(-0.6386555839363326, 0.6725226567625924),
        ],
        1e-13,
    );
    close(
        "chain tangent",
        &acc.jvp(&y2)?.unwrap(),
        &[
            c(1.3872068278098453, 6.410461341613535),
            c(-0.5762043348223905, -0.5918364769077493),
            c(-0.20548657616425348, -0.06769096015919),
            c(-0.7779243010793699, -0.6528283851600274),
        ],
        1e-12,
    );
    Ok(())
}

/// `Re⟨vjp(u), v⟩ = Re⟨u, jvp(v)⟩` (the real inner product
/// `⟨a, b⟩ = Σ conj(a)·b`): forward mode is the real-linear map whose
/// adjoint the tape computes, for holomorphic and non-holomorphic ops.
#[test]
fn forward_and_reverse_mode_are_adjoint_on_complex_inputs() -> Result<()> {
    let fs: [(&str, F); 6] = [
        ("sqrt tan", |x| x.sqrt()?.tan()),
        ("sigmoid times conj", |x| x.sigmoid()?.mul(&x.conj()?)),
        ("pow of rsqrt", |x| x.rsqrt()?.pow(&x.reciprocal()?)),
        ("abs and angle", |x| Tensor::complex(&x.abs()?, &x.angle()?)?.cosh()),
        ("real and imag", |x| {
            x.real()?.mul(&x.imag()?)?.cast(DType::C128)?.sinh()
        }),
        ("pow_scalar of exp", |x| x.exp()?.pow_scalar(-0.7)?.add(&x.log()?)),
    ];
    let (z, u, v) = (ct(&Z), ct(&W), ct(&V));
    let inner = |a: &Tensor, b: &Tensor| -> Result<f64> { a.conj()?.mul(b)?.real()?.sum_all()?.to_scalar::<f64>() };
    for (name, f) in fs {
        let tape = GradientTape::new();
        let y = tape.record(|| {
            tape.watch(&z);
            f(&z)
        })?;
        let g = tape
            .gradient_with(&y, &z, GradientOptions::default().output_gradients(vec![u.clone()]))?
            .unwrap();
        let acc = ForwardAccumulator::new();
        acc.watch(&z, &v)?;
        let y = acc.record(|| f(&z))?;
        let j = acc.jvp(&y)?.unwrap();
        let (lhs, rhs) = (inner(&g, &v)?, inner(&u, &j)?);
        assert!(
            (lhs - rhs).abs() <= 1e-12 * (1.0 + lhs.abs()),
            "{name}: ⟨vjp(u), v⟩ = {lhs}, ⟨u, jvp(v)⟩ = {rhs}"
        );
        // and the check can fail: a tangent turned by i breaks it
        let wrong = inner(&u, &j.mul(&Tensor::scalar(c(0.0, 1.0)))?)?;
        assert!(
            (lhs - wrong).abs() > 1e-6,
            "{name}: the check cannot tell a wrong tangent"
        );
    }
    Ok(())
}

#[test]
fn softmax_of_complex_is_refused_as_tensorflow_refuses_it() {
    // TensorFlow 2.21: tf.nn.softmax and tf.nn.log_softmax of complex128
    // raise InvalidArgumentError (allowed: half, bfloat16, float, double)
    let z = ct(&Z);
    for (op, r) in [("softmax", z.softmax(-1)), ("log_softmax", z.log_softmax(-1))] {
        let e = r.expect_err("complex softmax must be refused");
        assert!(matches!(e, Error::UnsupportedDType { .. }), "{op}: {e:?}");
        let msg = e.to_string();
        assert!(
            msg.contains(op) && (msg.contains("c128") || msg.contains("complex128")),
            "{op}: {msg}"
        );
    }
}

#[test]
fn complex_pow_needs_one_dtype() {
    let z = ct(&Z);
    let e = z
        .pow(&Tensor::vector(&[1.0f64, 2.0, 3.0, 4.0]))
        .expect_err("mixed dtypes");
    assert!(matches!(e, Error::DTypeMismatch { op: "pow", .. }), "{e:?}");
    let e = z.cast(DType::C64).unwrap().pow(&z).expect_err("mixed complex dtypes");
    assert!(matches!(e, Error::DTypeMismatch { op: "pow", .. }), "{e:?}");
}

/// `sqrt`, `log` and `rsqrt` of complex numbers whose modulus overflows
/// while the results do not: `|3e38 + 3e38i|` is past `f32`'s range, so
/// `C64`'s square root was `inf` and its logarithm's real part `inf`
/// (and `rsqrt` 0); the same near `f64`'s top for `C128`. The numbers are
/// NumPy 2's (`np.sqrt`, `np.log`, `1 / np.sqrt` in `complex64` and
/// `complex128`, C99's `csqrt`/`clog`), eagerly and traced.
#[test]
fn roots_and_logarithms_of_moduli_past_the_range_are_finite() -> Result<()> {
    type Row = (&'static str, [(f64, f64); 3]);
    type Case = (DType, [(f64, f64); 3], f64, [Row; 3]);
    let cases: [Case; 2] = [
        (
            DType::C64,
            [(3e38, 3e38), (-3e38, 1e38), (3e38, -3e38)],
            2e-6,
            [
                (
                    "sqrt",
                    [
                        (1.9029766711407542e19, 7.882387864409866e18),
                        (2.8484877316490527e18, 1.7553173172839252e19),
                        (1.9029766711407542e19, -7.882387864409866e18),
                    ],
                ),
                (
                    "log",
                    [
                        (88.94342041015625, 0.7853981852531433),
                        (88.64952087402344, 2.8198421001434326),
                        (88.94342041015625, -0.7853981852531433),
                    ],
                ),
                (
                    "rsqrt",
                    [
                        (4.485358760352663e-20, -1.857896608084257e-20),
                        (9.007709296192638e-21, -5.550800670415921e-20),
                        (4.485358760352663e-20, 1.857896608084257e-20),
                    ],
                ),
            ],
        ),
        (
            DType::C128,
            [(1.5e308, 1.5e308), (-1.7e308, 1e308), (1e308, -1.7e308)],
            1e-14,
            [
                (
                    "sqrt",
                    [
                        (1.345607733249115e154, 5.5736897274590134e153),
                        (3.6899071284491836e153, 1.3550476545737428e154),
                        (1.2190792206275197e154, -6.9724755013252e153),
                    ],
                ),
                (
                    "log",
                    [
                        (709.9482473405542, std::f64::consts::FRAC_PI_4),
                        (709.8754132209812, 2.609868586330988),
                        (709.8754132209812, -1.039072259536091),
                    ],
                ),
                (
                    "rsqrt",
                    [
                        (6.343255686650054e-155, -2.6274625350107117e-155),
                        (1.870857179273474e-155, -6.87036433321409e-155),
                        (6.180977007333686e-155, 3.535185411142066e-155),
                    ],
                ),
            ],
        ),
    ];
    for (dtype, z, tol, rows) in cases {
        let z = ct(&z).cast(dtype)?;
        for (name, want) in rows {
            let f: F = match name {
                "sqrt" => |z| z.sqrt(),
                "log" => |z| z.log(),
                _ => |z| z.rsqrt(),
            };
            let traced = gradtape::function(move |z: &Tensor| f(z));
            for (how, y) in [("eager", f(&z)?), ("traced", traced.call(&z)?)] {
                let got = y.cast(DType::C128)?.to_vec::<C>()?;
                for (g, &(re, im)) in got.iter().zip(&want) {
                    let ok =
                        |a: f64, b: f64| (a - b).abs() <= tol * b.abs().max(1e-300) || (a == 0.0 && b.abs() < 1e-300);
                    assert!(
                        ok(g.re, re) && ok(g.im, im),
                        "{name} {dtype:?} {how}: {got:?}, NumPy {want:?}"
                    );
                }
            }
        }
    }
    Ok(())
}
