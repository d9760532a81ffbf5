#!/usr/bin/env python3
"""Reads the `SPARE` lines that a build with spare-debug.patch prints under HIRT_SPARE_DEBUG=1
(one per batch of spares: the answers it backs up, the spares sent, the loss estimate and the
answer spacing) and, under the encoder's own model of the lost answers (compound Poisson, see
`Encoder::spares_needed`), prints:
  - the losses the model expects in batches whose lost answers outnumber their spares
    (E[L 1{L > k}] summed over the batches) for the spares actually sent;
  - the fewest spares any per-batch allocation needs for the same expected loss, and for a
    given total of spares the least expected loss (the Lagrangian optimum: each batch takes
    the k that minimises k + E[L 1{L > k}] / lambda).

    allocation.py LOG [--spares N] [--late X]
"""
import argparse, math, re

ap = argparse.ArgumentParser()
ap.add_argument("log")
ap.add_argument("--spares", type=int, help="least expected late losses with this many spares")
ap.add_argument("--late", type=float, help="fewest spares for this many expected late losses")
a = ap.parse_args()

def pmf(runs, theta, top):
    f = [math.exp(-runs)]
    for m in range(1, top + 1):
        g, acc = theta, 0.0
        for j in range(1, m + 1):
            acc += j * g * f[m - j]
            g *= 1 - theta
        f.append(runs / m * acc)
    return f

batches = []
pat = re.compile(r"SPARE answers=(\d+) k=(\d+) p=([\d.e-]+) burst=([\d.e-]+) spacing=(\d+)")
for line in open(a.log):
    m = pat.match(line)
    if not m:
        continue
    n, k, p, burst, spacing = int(m[1]), int(m[2]), float(m[3]), float(m[4]), int(m[5])
    # As Encoder::spares_needed.
    rho = (1 - 1 / max(burst, 1.0)) ** (min(spacing, 64) + 1)
    run = min(max(1 / max(1 - rho, 1e-6), 1.0), max(n, 1))
    runs = n * min(max(p, 0.0), 0.5) / run
    f = pmf(runs, 1 / run, n + 40)
    tail = [sum(l * f[l] for l in range(j + 1, len(f))) for j in range(n + 1)]
    batches.append((n, k, tail))

def allocate(lam):
    total = late = 0
    for n, _, tail in batches:
        k = min(range(n + 1), key=lambda j: j + tail[j] / lam)
        total += k
        late += tail[k]
    return total, late

def search(pred):
    """(allocate(lo), allocate(hi)) around the boundary where `pred` turns false as lambda
    grows (a larger lambda sends fewer spares and expects more late losses)."""
    lo, hi = 1e-4, 1.0
    for _ in range(60):
        mid = (lo * hi) ** 0.5
        if pred(*allocate(mid)):
            lo = mid
        else:
            hi = mid
    return allocate(lo), allocate(hi)

sent = sum(k for _, k, _ in batches)
late = sum(t[k] for _, k, t in batches)
print(f"batches {len(batches)}, answers {sum(n for n, _, _ in batches)}, spares sent {sent}, "
      f"expected late losses {late:.2f}")
best, _ = search(lambda t, l: l <= late)
print(f"optimal allocation for the same expected late losses: {best[0]} spares ({best[1]:.2f})")
if a.spares is not None:
    _, (t, l) = search(lambda t, l: t > a.spares)
    print(f"with {a.spares} spares at most: {t} spares, {l:.2f} expected late losses")
if a.late is not None:
    (t, l), _ = search(lambda t, l: l <= a.late)
    print(f"for {a.late} expected late losses at most: {t} spares ({l:.2f})")
