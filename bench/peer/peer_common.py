"""What the peer benchmark's JAX and PyTorch scripts share: the command
line, the synthetic data (so both peers train on the same batches), the
FLOP count per training step and the JSON line they print.

The workloads are tandem's, shape for shape (bench/step.c, `tandem train
--model linreg`), so ms/step compares the same work:
  linreg     5 features -> 1 (the seed 001 model), parameters from zero,
             SGD at 0.05, MSE; x ~ N(0, 1), y = x w + b + 0.1 noise
  mlp        Fashion-MNIST-shaped 28x28x1 u8 images / 255, flatten, dense
             512, relu, dense 512, relu, dense 10 (seed 003's MLP at
             tandem's width); Adam 2e-3; softmax cross-entropy
  cnn        the same images, conv 3x3 32 (SAME), relu, max-pool 2, conv 3x3
             64, relu, max-pool 2, dense 10 (seed 000's CNN); Adam 2e-3
  allreduce  the in-place mean over N replicas of one fp32 buffer of
             --bytes bytes (bench/allreduce's pmean), nothing else
  gpt        the character GPT of `tandem train --model gpt` (char_gpt_jax.py's
             recipe: 4 layers, 4 heads, width 128, context 64, GPT-2's init,
             tied head, AdamW 1e-3, weight decay 1e-4) on the bytes of $CORPUS
             (default /usr/share/games/fortunes); --batch counts sequences
Initialization is each framework's usual one for these layers (flax's
LeCun normal kernels and zero biases in JAX, torch's defaults in PyTorch);
pixels and labels are random bytes, so the loss stays near ln 10 = 2.30 and
only says the three train the same model, not how well.
"""
import argparse
import json
import os

import numpy as np

WORKLOADS = ('linreg', 'mlp', 'cnn', 'allreduce', 'gpt')
LINREG_FEATURES = 5
IMAGE = (28, 28, 1)
CLASSES = 10
MLP_WIDTHS = (28 * 28, 512, 512, CLASSES)
GPT_LAYERS, GPT_HEADS, GPT_WIDTH, GPT_CONTEXT, GPT_VOCAB = 4, 4, 128, 64, 256
DATA_POOL = 4  # distinct batches cycled through: data making stays out of the timed step
PRECISIONS = ('fp32', 'bf16')


def parse_args(peer):
    p = argparse.ArgumentParser(description=f'one peer ({peer}) run of a bench/peer workload')
    p.add_argument('--workload', choices=WORKLOADS, required=True)
    p.add_argument('--devices', type=int, default=1, help='data-parallel replicas N')
    p.add_argument('--batch', type=int, default=128, help='global batch (split evenly over N)')
    p.add_argument('--steps', type=int, default=20, help='timed steps')
    p.add_argument('--warmup', type=int, default=3, help='untimed steps first (compilation)')
    p.add_argument('--bytes', type=int, default=4 << 20, help='allreduce: buffer size')
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--precision', choices=PRECISIONS, default='fp32',
                   help='bf16: each peer\'s mixed precision on CPU (tandem --precision bf16, PyTorch autocast, '
                        'JAX bf16 params and activations with an fp32 loss); fp32 master weights everywhere. '
                        'The allreduce workload stays fp32')
    a = p.parse_args()
    if a.devices < 1 or a.batch % a.devices:
        p.error(f'--batch {a.batch} must split evenly over --devices {a.devices}')
    return a


def cores():
    return len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()


def corpus():
    """$CORPUS's bytes as tandem's text layer reads them: a file, or the
    files of a directory without a dot in their names, in name order."""
    path = os.environ.get('CORPUS', '/usr/share/games/fortunes')
    if os.path.isdir(path):
        names = sorted(n for n in os.listdir(path) if '.' not in n and os.path.isfile(os.path.join(path, n))
                       and not os.path.islink(os.path.join(path, n)))
        return b''.join(open(os.path.join(path, n), 'rb').read() for n in names)
    return open(path, 'rb').read()


def batches(workload, batch, seed):
    """DATA_POOL batches of (inputs, targets) as numpy arrays."""
    rng = np.random.default_rng(seed)
    out = []
    if workload == 'gpt':
        tokens = np.frombuffer(corpus(), dtype=np.uint8).astype(np.int32)
        tokens = tokens[:len(tokens) - len(tokens) // 10]  # the last tenth is tandem's held-out text
        for _ in range(DATA_POOL):
            starts = rng.integers(0, len(tokens) - GPT_CONTEXT - 1, size=batch)
            w = np.stack([tokens[s:s + GPT_CONTEXT + 1] for s in starts])
            out.append((w[:, :-1].copy(), w[:, 1:].copy()))
    elif workload == 'linreg':
        w = rng.standard_normal(LINREG_FEATURES).astype(np.float32)
        b = np.float32(rng.standard_normal())
        for _ in range(DATA_POOL):
            x = rng.standard_normal((batch, LINREG_FEATURES)).astype(np.float32)
            y = x @ w + b + np.float32(0.1) * rng.standard_normal(batch).astype(np.float32)
            out.append((x, y.reshape(batch, 1).astype(np.float32)))
    else:
        for _ in range(DATA_POOL):
            x = rng.integers(0, 256, (batch,) + IMAGE, dtype=np.uint8).astype(np.float32) / 255.0
            y = rng.integers(0, CLASSES, batch).astype(np.int32)
            out.append((x, y))
    return out


def flops_per_step(workload, batch):
    """Multiply-add FLOPs of one training step over the global batch:
    forward 2*B*M, weight gradients 2*B*M, input gradients 2*B*M except the
    first layer's (no gradient to the images), where M is the sum over the
    layers of their multiply-adds per example. Elementwise work (relu,
    pooling, softmax, Adam) is left out."""
    if workload == 'mlp':
        macs = [a * b for a, b in zip(MLP_WIDTHS, MLP_WIDTHS[1:])]
    elif workload == 'cnn':
        macs = [28 * 28 * 32 * 3 * 3 * 1, 14 * 14 * 64 * 3 * 3 * 32, 7 * 7 * 64 * CLASSES]
    else:
        return None
    return 2 * batch * (3 * sum(macs) - macs[0])


def row_precision(args):
    """The precision a row ran in: --precision, but the allreduce moves fp32
    buffers whatever it says."""
    return 'fp32' if args.workload == 'allreduce' else args.precision


def report(peer, version, args, seconds, loss, **extra):
    seconds = sorted(seconds)
    row = {'peer': peer, 'version': version, 'workload': args.workload, 'devices': args.devices,
           'batch': args.batch if args.workload != 'allreduce' else None,
           'bytes': args.bytes if args.workload == 'allreduce' else None,
           'steps': len(seconds), 'ms_per_step': 1e3 * seconds[len(seconds) // 2],
           'loss': None if loss is None else float(loss),
           'precision': row_precision(args)}
    row.update(extra)
    print(json.dumps(row), flush=True)
