import sys
for f in sys.argv[1:]:
    v=sorted(float(x) for x in open(f) if x.strip())
    n=len(v); q=lambda p: v[min(n-1,int(p*n))]
    print(f"{f:22s} n {n} p50 {q(.5):.1f} p90 {q(.9):.1f} p95 {q(.95):.1f} p99 {q(.99):.1f} >56ms {100*sum(x>56 for x in v)/n:.2f}% >70ms {100*sum(x>70 for x in v)/n:.2f}% >100ms {100*sum(x>100 for x in v)/n:.2f}%")
