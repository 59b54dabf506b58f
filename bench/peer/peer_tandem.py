"""tandem's side of bench/peer, with the peers' command line and JSON line:
runs tandem's own binaries from the build directory in $TANDEM_BUILD and
turns their output into peer_common.report's row.
  linreg,    tools/tandem train --model linreg|gpt --steps W+S --metrics FILE:
  gpt        the median of the per-step seconds after the first W steps
             (gpt on $CORPUS, default /usr/share/games/fortunes)
  mlp, cnn   bench/step --model M --rounds 1 (median step, last loss)
  allreduce  bench/allreduce --max-bytes BYTES: its row for BYTES (the
             median of its own trials; --steps and --warmup do not apply,
             BYTES must be 4096 x a power of 4)
--precision bf16 passes --precision bf16 to tools/tandem and bench/step
(the allreduce stays fp32).
The mesh is cpu:N. tandem's CPU devices share the machine's cores among
them (one thread each, spare cores spread over a device's kernels).
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_common as pc  # noqa: E402

args = pc.parse_args('tandem')
build = os.environ.get('TANDEM_BUILD') or os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..',
                                                      'build')
mesh = f'cpu:{args.devices}'


def lines(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=600).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith('{')]


if args.workload in ('linreg', 'gpt'):
    data = ['--data', os.environ.get('CORPUS', '/usr/share/games/fortunes')] if args.workload == 'gpt' else []
    with tempfile.TemporaryDirectory() as tmp:
        metrics = os.path.join(tmp, 'metrics.jsonl')
        lines([os.path.join(build, 'tools', 'tandem'), 'train', '--model', args.workload, '--devices', mesh,
               '--batch', str(args.batch), '--steps', str(args.warmup + args.steps), '--eval-every', '0',
               '--seed', str(args.seed), '--metrics', metrics, '--precision', args.precision] + data)
        steps = [json.loads(line) for line in open(metrics)]
    steps = [s for s in steps if s.get('kind') == 'step']
    timed = [s for s in steps if s['global_step'] > args.warmup]
    seconds, loss = [s['seconds'] for s in timed], steps[-1]['loss']
elif args.workload in ('mlp', 'cnn'):
    row = lines([os.path.join(build, 'bench', 'step'), '--model', args.workload, '--devices', mesh,
                 '--batch', str(args.batch), '--steps', str(args.steps), '--warmup', str(args.warmup),
                 '--rounds', '1', '--precision', args.precision, '--json'])[0]
    seconds, loss = [row['median_step_s']] * row['steps'], row['last_loss']
else:
    rows = [r for r in lines([os.path.join(build, 'bench', 'allreduce'), '--devices', mesh, '--max-bytes',
                              str(args.bytes), '--json']) if r.get('bytes') == args.bytes]
    if not rows:
        sys.exit(f'peer_tandem: bench/allreduce measured no row of {args.bytes} bytes '
                 '(expected 4096 x a power of 4)')
    seconds, loss = [rows[0]['seconds']], None
version = subprocess.run([os.path.join(build, 'tools', 'tandem'), '--version'], capture_output=True,
                         text=True).stdout.split()
pc.report('tandem', version[-1] if version else '?', args, seconds, loss,
          flops=pc.flops_per_step(args.workload, args.batch))
