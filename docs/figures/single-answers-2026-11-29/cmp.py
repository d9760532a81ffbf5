import json,sys,statistics as st,os
# cmp.py GRIDS_DIR TAG_A TAG_B: the table of two grids.sh runs (files TAG-RATE-DELAY.json)
d,a,b=sys.argv[1],sys.argv[2],sys.argv[3]
rows=[(r,dl) for r in (1000,10000,100000) for dl in ('5ms','25ms','300ms')]
tot={a:[0,0],b:[0,0]}
print('| rate, one-way delay | meet both: %s / %s | >= 99.9 %% in time | in time min, %% | overhead / limit, median |'%(a,b))
print('|---|---|---|---|---|')
for r,dl in rows:
    out=[]
    for p in (a,b):
        f=os.path.join(d,'%s-%d-%s.json'%(p,r,dl))
        x=json.load(open(f))
        both=sum(1 for y in x if y[5]); it=sum(1 for y in x if y[2]>=0.999)
        mn=min(y[2] for y in x)*100; med=st.median(y[3]/y[4] for y in x)
        out.append((both,it,mn,med)); tot[p][0]+=both; tot[p][1]+=it
    print('| %d kpps, %s | %d / %d | %d / %d | %.2f / %.2f | %.2f / %.2f |'%(r//1000,dl,out[0][0],out[1][0],out[0][1],out[1][1],out[0][2],out[1][2],out[0][3],out[1][3]))
print('| all | %d / %d | %d / %d | | |'%(tot[a][0],tot[b][0],tot[a][1],tot[b][1]))
