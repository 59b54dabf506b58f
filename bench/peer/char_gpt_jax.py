"""The character GPT recipe in JAX, the peer of `tandem train --model gpt`
(bench/peer/char_gpt.sh runs both on the same corpus in one run).

nanoGPT's CPU character recipe: 4 layers, 4 heads, width 128, context 64,
batch 12, no dropout; AdamW at a constant 1e-3 (betas 0.9 / 0.999, eps
1e-8, weight decay 1e-4 on every parameter: tandem's defaults), GPT-2's
initialization and architecture (pre-LayerNorm, fused QKV, GELU(tanh),
tied head). Data as tandem's text layer reads it: the corpus's bytes
(vocabulary 256), the last 10% held out; training windows of T+1 drawn
uniformly (numpy's generator: not tandem's stream, so the batches differ,
not their distribution); validation over every full window of T+1 at
stride T from the start of the held-out tail.

Prints one JSON line: steps, median ms per step, tokens/s, final validation
loss (nats) and bits per byte.

  python char_gpt_jax.py CORPUS_DIR_OR_FILE [--steps N] [--seed S]
"""
import argparse
import json
import math
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax


def read_corpus(path):
    if os.path.isdir(path):
        names = sorted(n for n in os.listdir(path)
                       if '.' not in n and os.path.isfile(os.path.join(path, n))
                       and not os.path.islink(os.path.join(path, n)))
        data = b''.join(open(os.path.join(path, n), 'rb').read() for n in names)
    else:
        data = open(path, 'rb').read()
    tokens = np.frombuffer(data, dtype=np.uint8).astype(np.int32)
    cut = len(tokens) - int(len(tokens) * 0.1)
    return tokens[:cut], tokens[cut:]


def init_params(key, V, C, L, D):
    keys = iter(jax.random.split(key, 4 + 4 * L))
    std, proj_std = 0.02, 0.02 / math.sqrt(2 * L)
    normal = lambda shape, s: s * jax.random.normal(next(keys), shape, jnp.float32)
    p = {'wte': normal((V, D), std), 'wpe': normal((C, D), std),
         'ln_f': (jnp.ones(D), jnp.zeros(D)), 'blocks': []}
    for _ in range(L):
        p['blocks'].append({
            'ln_1': (jnp.ones(D), jnp.zeros(D)), 'ln_2': (jnp.ones(D), jnp.zeros(D)),
            'attn': (normal((D, 3 * D), std), jnp.zeros(3 * D)),
            'attn_proj': (normal((D, D), proj_std), jnp.zeros(D)),
            'fc': (normal((D, 4 * D), std), jnp.zeros(4 * D)),
            'fc_proj': (normal((4 * D, D), proj_std), jnp.zeros(D)),
        })
    return p


def layer_norm(x, wb):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) * jax.lax.rsqrt(v + 1e-5) * wb[0] + wb[1]


def forward(p, tokens, H):
    B, T = tokens.shape
    D = p['wte'].shape[1]
    x = p['wte'][tokens] + p['wpe'][:T]
    mask = jnp.tril(jnp.ones((T, T), bool))
    for blk in p['blocks']:
        h = layer_norm(x, blk['ln_1'])
        qkv = h @ blk['attn'][0] + blk['attn'][1]
        q, k, v = jnp.split(qkv, 3, axis=-1)
        heads = lambda t: t.reshape(B, T, H, D // H).transpose(0, 2, 1, 3)
        q, k, v = heads(q), heads(k), heads(v)
        att = (q @ k.transpose(0, 1, 3, 2)) / math.sqrt(D // H)
        att = jax.nn.softmax(jnp.where(mask, att, -jnp.inf), axis=-1)
        y = (att @ v).transpose(0, 2, 1, 3).reshape(B, T, D)
        x = x + y @ blk['attn_proj'][0] + blk['attn_proj'][1]
        h = layer_norm(x, blk['ln_2'])
        h = jax.nn.gelu(h @ blk['fc'][0] + blk['fc'][1], approximate=True)
        x = x + h @ blk['fc_proj'][0] + blk['fc_proj'][1]
    x = layer_norm(x, p['ln_f'])
    return x @ p['wte'].T


def loss_fn(p, x, y, H):
    logits = forward(p, x, H)
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('corpus')
    ap.add_argument('--steps', type=int, default=2000)
    ap.add_argument('--seed', type=int, default=0)
    ap.add_argument('--layers', type=int, default=4)
    ap.add_argument('--heads', type=int, default=4)
    ap.add_argument('--width', type=int, default=128)
    ap.add_argument('--context', type=int, default=64)
    ap.add_argument('--batch', type=int, default=12)
    ap.add_argument('--lr', type=float, default=1e-3)
    a = ap.parse_args()
    train, val = read_corpus(a.corpus)
    T, B, H = a.context, a.batch, a.heads
    params = init_params(jax.random.PRNGKey(a.seed), 256, T, a.layers, a.width)
    opt = optax.adamw(a.lr, b1=0.9, b2=0.999, eps=1e-8, weight_decay=1e-4)
    state = opt.init(params)

    @jax.jit
    def step(params, state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y, H)
        updates, state = opt.update(grads, state, params)
        return optax.apply_updates(params, updates), state, loss

    eval_loss = jax.jit(lambda p, x, y: loss_fn(p, x, y, H))
    rng = np.random.default_rng(a.seed)
    times = []
    for i in range(a.steps):
        starts = rng.integers(0, len(train) - T - 1, size=B)
        w = np.stack([train[s:s + T + 1] for s in starts])
        t0 = time.perf_counter()
        params, state, loss = step(params, state, jnp.asarray(w[:, :-1]), jnp.asarray(w[:, 1:]))
        loss.block_until_ready()
        times.append(time.perf_counter() - t0)
    windows = (len(val) - 1) // T
    total, count = 0.0, 0
    for first in range(0, windows, 64):
        w = np.stack([val[s * T:s * T + T + 1] for s in range(first, min(windows, first + 64))])
        total += float(eval_loss(params, jnp.asarray(w[:, :-1]), jnp.asarray(w[:, 1:]))) * len(w)
        count += len(w)
    ms = 1e3 * float(np.median(times[1:]))
    print(json.dumps({'peer': 'jax', 'jax': jax.__version__, 'steps': a.steps, 'median_ms': round(ms, 2),
                      'tokens_per_s': round(B * T / (ms / 1e3), 1), 'val_loss': round(total / count, 4),
                      'val_bits_per_byte': round(total / count / math.log(2), 4),
                      'wall_s': round(sum(times), 1)}))


if __name__ == '__main__':
    main()
