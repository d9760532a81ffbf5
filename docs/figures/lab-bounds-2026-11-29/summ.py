import re,sys,statistics as st,collections
rows=collections.defaultdict(list)
for f in sys.argv[1:]:
    for l in open(f):
        m=re.match(r'(\S+) s(\d) n=\d+ p50 ([\d.]+) .* p99 ([\d.]+) .*ovh ([\d.]+)% bytes ([\d.]+)%',l)
        if m: rows[m.group(1)].append((int(m.group(2)),float(m.group(3)),float(m.group(4)),float(m.group(5)),float(m.group(6))))
for k,v in rows.items():
    ok=[x for x in v if x[1]<=53.0]
    f=lambda i,vv: '%.1f / %.1f / %.1f'%(min(x[i] for x in vv),st.median(x[i] for x in vv),max(x[i] for x in vv))
    print(f'{k:8} n={len(v)} ok={len(ok)} p99 all {f(2,v)} | p99 ok {f(2,ok) if ok else "-"} | ovh {f(3,v)} | bytes {f(4,v)}')
