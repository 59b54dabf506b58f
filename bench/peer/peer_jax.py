"""JAX peer of bench/peer's workloads (see peer_common.py for the models):
jit on one CPU device for --devices 1 (XLA spreads each op over every core),
pmap over N host devices for N > 1 (XLA_FLAGS
--xla_force_host_platform_device_count=N, set here before jax loads), the
gradients averaged with lax.pmean as in seeds 000 and 001. --precision bf16
casts the parameters and inputs to bfloat16 inside the loss (so forward and
backward run in bf16), the logits back to fp32 for the loss; parameters,
gradients and the optimizer stay fp32. Prints one JSON line
(peer_common.report).

  python peer_jax.py --workload linreg|mlp|cnn|allreduce|gpt --devices N
                     --batch B --steps S --warmup W [--bytes BYTES]
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_common as pc  # noqa: E402

args = pc.parse_args('jax')
os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') +
                           f' --xla_force_host_platform_device_count={args.devices}').strip()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

import char_gpt_jax  # noqa: E402  (the GPT's parameters and loss, shared with char_gpt.sh)

N = args.devices
lecun = jax.nn.initializers.lecun_normal()


def init(key):
    keys = iter(jax.random.split(key, 8))
    if args.workload == 'gpt':
        return char_gpt_jax.init_params(key, pc.GPT_VOCAB, pc.GPT_CONTEXT, pc.GPT_LAYERS, pc.GPT_WIDTH)
    if args.workload == 'linreg':
        return {'w': jnp.zeros((pc.LINREG_FEATURES, 1)), 'b': jnp.zeros((1,))}
    if args.workload == 'mlp':
        return [{'w': lecun(next(keys), (a, b)), 'b': jnp.zeros((b,))}
                for a, b in zip(pc.MLP_WIDTHS, pc.MLP_WIDTHS[1:])]
    return {'conv1': {'w': lecun(next(keys), (3, 3, 1, 32)), 'b': jnp.zeros((32,))},
            'conv2': {'w': lecun(next(keys), (3, 3, 32, 64)), 'b': jnp.zeros((64,))},
            'dense': {'w': lecun(next(keys), (7 * 7 * 64, pc.CLASSES)), 'b': jnp.zeros((pc.CLASSES,))}}


def conv_relu_pool(p, x):
    y = jax.lax.conv_general_dilated(x, p['w'], (1, 1), 'SAME', dimension_numbers=('NHWC', 'HWIO', 'NHWC'))
    y = jax.nn.relu(y + p['b'])
    return jax.lax.reduce_window(y, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), 'VALID')


def loss_fn(params, x, y):
    if args.precision == 'bf16':
        params = jax.tree.map(lambda a: a.astype(jnp.bfloat16), params)
        if jnp.issubdtype(x.dtype, jnp.floating):
            x = x.astype(jnp.bfloat16)
    return full_loss(params, x, y).astype(jnp.float32)


def full_loss(params, x, y):
    if args.workload == 'gpt':
        return char_gpt_jax.loss_fn(params, x, y, pc.GPT_HEADS)
    if args.workload == 'linreg':
        return jnp.mean((x @ params['w'] + params['b'] - y) ** 2)
    if args.workload == 'mlp':
        h = x.reshape(x.shape[0], -1)
        for layer in params[:-1]:
            h = jax.nn.relu(h @ layer['w'] + layer['b'])
        logits = h @ params[-1]['w'] + params[-1]['b']
    else:
        h = conv_relu_pool(params['conv2'], conv_relu_pool(params['conv1'], x))
        logits = h.reshape(h.shape[0], -1) @ params['dense']['w'] + params['dense']['b']
    return optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), y).mean()


def timed(step, state, data):
    seconds, loss = [], None
    for i in range(args.warmup + args.steps):
        x, y = data[i % len(data)]
        t = time.perf_counter()
        state, loss = step(state, x, y)
        jax.block_until_ready(loss)
        if i >= args.warmup:
            seconds.append(time.perf_counter() - t)
    return seconds, loss


def train():
    opt = {'linreg': optax.sgd(0.05),
           'gpt': optax.adamw(1e-3, b1=0.9, b2=0.999, eps=1e-8, weight_decay=1e-4)}.get(args.workload,
                                                                                     optax.adam(2e-3))
    params = init(jax.random.PRNGKey(args.seed))
    state = (params, opt.init(params))

    def update(state, x, y, axis=None):
        params, opt_state = state
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        if axis:
            grads, loss = jax.lax.pmean((grads, loss), axis)
        updates, opt_state = opt.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), loss

    host = pc.batches(args.workload, args.batch, args.seed)
    if N == 1:
        data = [(jnp.asarray(x), jnp.asarray(y)) for x, y in host]
        seconds, loss = timed(jax.jit(update), state, data)
        return seconds, loss
    # pmap of the identity places row block i of its input on device i.
    place = jax.pmap(lambda a: a)
    shard = lambda a: place(a.reshape((N, -1) + a.shape[1:]))
    data = [(shard(x), shard(y)) for x, y in host]
    state = jax.tree.map(lambda a: place(jnp.stack([a] * N)), state)
    step = jax.pmap(lambda s, x, y: update(s, x, y, 'batch'), axis_name='batch')
    seconds, loss = timed(step, state, data)
    return seconds, loss[0]


def allreduce():
    count = args.bytes // 4
    buf = jax.pmap(lambda a: a)(np.arange(N, dtype=np.float32)[:, None] * np.ones((N, count), np.float32))
    step = jax.pmap(lambda b: jax.lax.pmean(b, 'i'), axis_name='i')
    seconds = []
    for i in range(args.warmup + args.steps):
        t = time.perf_counter()
        buf = jax.block_until_ready(step(buf))
        if i >= args.warmup:
            seconds.append(time.perf_counter() - t)
    return seconds, None


seconds, loss = allreduce() if args.workload == 'allreduce' else train()
pc.report('jax', jax.__version__, args, seconds, loss,
          flops=pc.flops_per_step(args.workload, args.batch))
