"""PyTorch peer of bench/peer's workloads (see peer_common.py for the
models): for --devices 1 one process with torch.set_num_threads(cores); for
N > 1, N processes (torch.multiprocessing spawn) joined over gloo on
localhost, the model wrapped in DistributedDataParallel, each process with
cores / N threads (at least 1) and its 1/N of the global batch. A step is
synchronous (DDP's all-reduce runs in backward), so process 0's step time
is the step's. The loss printed is the mean over the processes of the last
step's. --precision bf16 runs forward and the loss under
torch.autocast('cpu', dtype=torch.bfloat16) (PyTorch's CPU mixed precision:
bf16 matrix products and convolutions, fp32 parameters and optimizer).
Prints one JSON line (peer_common.report).

  python peer_torch.py --workload linreg|mlp|cnn|allreduce|gpt --devices N
                       --batch B --steps S --warmup W [--bytes BYTES]
"""
import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_common as pc  # noqa: E402

os.environ.setdefault('OMP_WAIT_POLICY', 'PASSIVE')  # before torch loads its OpenMP runtime

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from torch import nn  # noqa: E402


class Block(nn.Module):
    """GPT-2's block: pre-LayerNorm, fused QKV, causal attention, GELU(tanh)."""

    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn, self.attn_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.fc_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.attn(self.ln_1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn_proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.fc_proj(nn.functional.gelu(self.fc(self.ln_2(x)), approximate='tanh'))


class GPT(nn.Module):
    """The character GPT (peer_common's sizes), GPT-2's initialization: normal
    0.02, the residual projections 0.02 / sqrt(2 L), zero biases, tied head."""

    def __init__(self):
        super().__init__()
        d, layers = pc.GPT_WIDTH, pc.GPT_LAYERS
        self.wte, self.wpe = nn.Embedding(pc.GPT_VOCAB, d), nn.Embedding(pc.GPT_CONTEXT, d)
        self.blocks = nn.ModuleList(Block(d, pc.GPT_HEADS) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        for name, p in self.named_parameters():
            if name.endswith('bias'):
                nn.init.zeros_(p)
            elif p.dim() == 2:
                std = 0.02 / (2 * layers) ** 0.5 if name.endswith('proj.weight') else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, tokens):
        x = self.wte(tokens) + self.wpe(torch.arange(tokens.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.T


def model(workload):
    if workload == 'gpt':
        return GPT()
    if workload == 'linreg':
        m = nn.Linear(pc.LINREG_FEATURES, 1)
        nn.init.zeros_(m.weight)
        nn.init.zeros_(m.bias)
        return m
    if workload == 'mlp':
        w = pc.MLP_WIDTHS
        return nn.Sequential(nn.Flatten(), nn.Linear(w[0], w[1]), nn.ReLU(), nn.Linear(w[1], w[2]), nn.ReLU(),
                             nn.Linear(w[2], w[3]))
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(7 * 7 * 64, pc.CLASSES))


def local_batches(args, rank):
    """This process's rows of each global batch, images as NCHW."""
    rows = args.batch // args.devices
    out = []
    for x, y in pc.batches(args.workload, args.batch, args.seed):
        x, y = x[rank * rows:(rank + 1) * rows], y[rank * rows:(rank + 1) * rows]
        if x.ndim == 4:
            x = x.transpose(0, 3, 1, 2).copy()
        out.append((torch.from_numpy(x), torch.from_numpy(y).long() if y.dtype.kind == 'i' else torch.from_numpy(y)))
    return out


def train(args, rank):
    torch.manual_seed(args.seed)
    net = model(args.workload)
    if args.devices > 1:
        net = nn.parallel.DistributedDataParallel(net)
    if args.workload == 'linreg':
        opt, criterion = torch.optim.SGD(net.parameters(), lr=0.05), nn.MSELoss()
    elif args.workload == 'gpt':
        opt = torch.optim.AdamW(net.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-4)
        criterion = lambda logits, y: nn.functional.cross_entropy(logits.reshape(-1, pc.GPT_VOCAB), y.reshape(-1))
    else:
        opt, criterion = torch.optim.Adam(net.parameters(), lr=2e-3), nn.CrossEntropyLoss()
    data = local_batches(args, rank)
    seconds, loss = [], None
    for i in range(args.warmup + args.steps):
        x, y = data[i % len(data)]
        t = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast('cpu', dtype=torch.bfloat16, enabled=args.precision == 'bf16'):
            loss = criterion(net(x), y)
        loss.backward()
        opt.step()
        if i >= args.warmup:
            seconds.append(time.perf_counter() - t)
    loss = loss.detach()
    if args.devices > 1:
        dist.all_reduce(loss)
        loss /= args.devices
    return seconds, loss.item()


def allreduce(args):
    buf = torch.full((args.bytes // 4,), float(dist.get_rank()))
    seconds = []
    for i in range(args.warmup + args.steps):
        t = time.perf_counter()
        dist.all_reduce(buf)
        buf /= args.devices
        if i >= args.warmup:
            seconds.append(time.perf_counter() - t)
    return seconds, None


def run(rank, args, port):
    if args.devices > 1:
        torch.set_num_threads(max(1, pc.cores() // args.devices))
        dist.init_process_group('gloo', init_method=f'tcp://127.0.0.1:{port}', rank=rank,
                                world_size=args.devices)
    else:
        torch.set_num_threads(pc.cores())
    seconds, loss = allreduce(args) if args.workload == 'allreduce' else train(args, rank)
    if rank == 0:
        pc.report('torch', torch.__version__, args, seconds, loss, threads=torch.get_num_threads(),
                  omp_wait_policy=os.environ['OMP_WAIT_POLICY'],
                  flops=pc.flops_per_step(args.workload, args.batch))
    if args.devices > 1:
        dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


if __name__ == '__main__':
    args = pc.parse_args('torch')
    if args.workload == 'allreduce' and args.devices < 2:
        sys.exit('peer_torch: allreduce needs --devices 2 or more')
    if args.devices == 1:
        run(0, args, None)
    else:
        mp.spawn(run, args=(args, free_port()), nprocs=args.devices, join=True)
