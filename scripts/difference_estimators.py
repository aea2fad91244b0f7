"""The seed-level difference estimators compared in docs/evaluation.md (the difference's interval): each candidate's
coverage, per-benchmark rate and Holm family-wise rate on calibration.py's worlds, 3 seeds per arm (the same worlds
as ``populora bench stats``'s 3-seed rows: the same generator seeds). A variance of 0 gives p = 0 unless the mean is
0, as ``stats.seed_compare`` does (an earlier version counted it as p = 1 and so read the plain t's family-wise rate
as 0.03-0.06 where ``bench stats`` measured 0.08-0.13). ``python scripts/difference_estimators.py R`` (R = 300:
~5 min on 2 cores); ``planted R``: coverage under effects. The kept one is ``A1`` (``stats.difference_variance``).
"""
import sys, json, time
import numpy as np
from scipy import stats as sps
from populora.evaluation.statistics import calibration as C, stats

def parts(strata, w=None):
    strata = [np.asarray(x, float) for x in strata]
    w = np.full(len(strata), 1/len(strata)) if w is None else np.asarray(w)
    S = strata[0].shape[0]
    per_seed = sum(wx * x.mean(axis=1) for x, wx in zip(strata, w))
    seed_term = per_seed.var(ddof=1) / S
    pt, noise, comps = 0.0, 0.0, []
    for x, wx in zip(strata, w):
        P = x.shape[1]
        resid = x - x.mean(axis=1, keepdims=True) - x.mean(axis=0, keepdims=True) + x.mean()
        ms_p = S * x.mean(axis=0).var(ddof=1)
        ms_r = (resid ** 2).sum() / ((S - 1) * (P - 1))
        sc = wx ** 2 / (S * P)
        pt += sc * (ms_p - ms_r)
        noise += sc * ms_r
        comps.append((sc * ms_p, P - 1, sc * ms_r, (S - 1) * (P - 1)))
    return per_seed.mean(), seed_term, pt, noise, S, comps

def cand(name, strata):
    m, st, pt, noise, S, comps = parts(strata)
    df = S - 1
    chi2_floor = lambda q: noise * sps.chi2.ppf(q, S - 1) / (S - 1)  # the seed term's q quantile with no seed effect
    if name == "C0 seed + max(0, problem)":
        v = st + max(pt, 0.0)
    elif name == "C3 seed only":
        v = st
    elif name == "C1 signed, floor noise":
        v = max(st + pt, noise)
    elif name == "C4 REML-Satt":
        if st >= noise:
            v = st + max(pt, 0.0)
        else:  # sigma_seed truncated at 0: the seed term is the residual noise, many df
            v = noise + max(pt, 0.0)
            terms = [(noise, sum(c[3] for c in comps))]
            if pt > 0:
                terms += [(c[0], c[1]) for c in comps] + [(-c[2], c[3]) for c in comps]
            df = v ** 2 / sum(t ** 2 / d for t, d in terms)
    elif name == "C5 seed + max(0, problem), floor 5%":
        v = max(st + max(pt, 0.0), chi2_floor(0.05))
    elif name.startswith("A"):  # A1, A5, A10: the seed term alone, floored at its 1 / 5 / 10% quantile
        v = max(st, chi2_floor(int(name.split()[0][1:]) / 100))
    elif name == "B5 seed + signed problem, floor 5%":
        v = max(st + pt, chi2_floor(0.05))
    else:
        raise KeyError(name)
    p = (0.0 if m != 0 else 1.0) if v <= 0 else float(2 * sps.t.sf(abs(m) / np.sqrt(v), df))  # stats' tie rule
    half = sps.t.ppf(0.975, df) * np.sqrt(max(v, 0))
    return m, (m - half, m + half), p

CANDS = ["C0 seed + max(0, problem)", "C3 seed only", "A1 seed floored 1%", "A5 seed floored 5%",
         "A10 seed floored 10%", "B5 seed + signed problem, floor 5%"]

def main(R, seed=0):
    n = C.sizes(); names = list(n)
    out = {}
    for i, r in enumerate(C.REGIMES):
        rng = np.random.default_rng([seed, i, 3])
        truth = C.true_difference(r, names)
        tov = float(np.mean(list(truth.values())))
        acc = {c: {"cov_overall": [], "fires_overall": [], "cov_bench": [], "fires_bench": [], "family": []} for c in CANDS}
        t0 = time.time()
        for _ in range(R):
            _, members, base, _ = C.simulate(rng, r, n)
            a = C.arms(members, base, weakest=True)
            for c in CANDS:
                ps = []
                for arm in ("population mean", "weakest"):
                    for b in names:
                        m, ci, p = cand(c, [a[arm][b] - a["baseline"][b]])
                        ps.append(p)
                        if arm == "population mean":
                            acc[c]["cov_bench"].append(ci[0] <= truth[b] <= ci[1]); acc[c]["fires_bench"].append(p < 0.05)
                acc[c]["family"].append(min(stats.holm(ps)) < 0.05)
                m, ci, p = cand(c, [a["population mean"][b] - a["baseline"][b] for b in names])
                acc[c]["cov_overall"].append(ci[0] <= tov <= ci[1]); acc[c]["fires_overall"].append(p < 0.05)
        out[r.name] = {c: {k: float(np.mean(v)) for k, v in d.items()} for c, d in acc.items()}
        print(r.name, f"{time.time()-t0:.0f}s", json.dumps(out[r.name]), flush=True)
    return out

def planted(R: int) -> None:
    """Coverage of the old (C0) and kept (A1) intervals where the problem term's truth is not 0."""
    n = C.sizes(); names = list(n)
    reg, target = C.planted(n, sigma=0.1, seeds=3)
    big = C.Regime("planted 0.5 logit, sigma 0.1", 0.1, seeds=3, effect=0.5)
    spread = C.Regime("members +-0.4, sigma 0.1", 0.1, seeds=3, spread=0.4)
    for i, r in enumerate([reg, big, spread]):
        rng = np.random.default_rng([0, 50 + i])
        truth = C.true_difference(r, names); tov = float(np.mean(list(truth.values())))
        acc = {c: {"cov_overall": [], "cov_bench": [], "fires_overall": []} for c in ("C0 seed + max(0, problem)", "A1 seed floored 1%")}
        for _ in range(R):
            _, members, base, _ = C.simulate(rng, r, n)
            a = C.arms(members, base, weakest=False)
            for c in acc:
                for b in names:
                    m, ci, p = cand(c, [a["population mean"][b] - a["baseline"][b]])
                    acc[c]["cov_bench"].append(ci[0] <= truth[b] <= ci[1])
                m, ci, p = cand(c, [a["population mean"][b] - a["baseline"][b] for b in names])
                acc[c]["cov_overall"].append(ci[0] <= tov <= ci[1]); acc[c]["fires_overall"].append(p < 0.05)
        print(r.name, json.dumps({c: {k: round(float(np.mean(v)), 3) for k, v in d.items()} for c, d in acc.items()}), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "planted":
        planted(int(sys.argv[2]))
    else:
        print(json.dumps(main(int(sys.argv[1]))))
