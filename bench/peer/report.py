"""bench/peer's table: reads the JSON lines of one `bench/peer/run` (each
tagged with its round) and prints a markdown table per configuration
(workload, precision, batch or bytes, N): the median ms/step of each of JAX, PyTorch
and tandem over the rounds, each peer's ratio to tandem (peer's time ÷
tandem's, taken within each round, median over rounds: above 1, tandem is
faster), the fraction of the machine's fp32 FMA peak each reaches for the
MLP and CNN (peer_common.flops_per_step ÷ time ÷ PEAK_GFLOPS, which
bench/peer/run measures with bench/peak in the same run), and the last
training loss of each beside the others.

  PEAK_GFLOPS=G python report.py RUN.jsonl
"""
import json
import os
import statistics
import sys

PEERS = ('jax', 'torch', 'tandem')
if not os.environ.get('PEAK_GFLOPS'):
    sys.exit('report.py: set PEAK_GFLOPS (bench/peer/run measures it with bench/peak)')
peak = float(os.environ['PEAK_GFLOPS'])
rows = [json.loads(line) for line in open(sys.argv[1]) if line.startswith('{')]
configs = []
for r in rows:
    key = (r['workload'], r.get('precision', 'fp32'), r['batch'] or r['bytes'], r['devices'])
    if key not in configs:
        configs.append(key)


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(v, spec):
    return '—' if v is None else format(v, spec)


print(f'| workload | precision | batch / bytes | N | JAX ms | PyTorch ms | tandem ms | JAX ÷ tandem | PyTorch ÷ tandem '
      f'| peak: JAX / PyTorch / tandem | loss: JAX / PyTorch / tandem |')
print('|---|---|---|---|---|---|---|---|---|---|---|')
for workload, precision, size, n in configs:
    mine = [r for r in rows if (r['workload'], r.get('precision', 'fp32'), r['batch'] or r['bytes'], r['devices']) ==
            (workload, precision, size, n)]
    by_round = {}
    for r in mine:
        by_round.setdefault(r['round'], {})[r['peer']] = r
    ms = {p: median(r['ms_per_step'] for r in mine if r['peer'] == p) for p in PEERS}
    ratio = {p: median(rd[p]['ms_per_step'] / rd['tandem']['ms_per_step'] for rd in by_round.values()
                       if p in rd and 'tandem' in rd) for p in ('jax', 'torch')}
    loss = {p: median(r['loss'] for r in mine if r['peer'] == p) for p in PEERS}
    flops = next((r['flops'] for r in mine if r.get('flops')), None)
    frac = {p: (flops / (ms[p] * 1e-3) / (peak * 1e9) if flops and ms[p] else None) for p in PEERS}
    # Three significant figures: a linreg step is hundredths of a millisecond.
    print(f'| {workload} | {precision} | {size} | {n} | ' + ' | '.join(fmt(ms[p], '.3g') for p in PEERS) +
          f' | {fmt(ratio["jax"], ".2f")} | {fmt(ratio["torch"], ".2f")} | ' +
          ' / '.join(fmt(frac[p], '.2f') for p in PEERS) + ' | ' +
          ' / '.join(fmt(loss[p], '.3f') for p in PEERS) + ' |')
print(f'\n{len(set(r["round"] for r in rows))} round(s); peak {peak:g} GFLOP/s; '
      + '; '.join(sorted({f'{r["peer"]} {r["version"]}' for r in rows})))
