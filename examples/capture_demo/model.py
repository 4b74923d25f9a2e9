"""A toy model that calls ``kernel.decay_step`` the way a decoder would: once per layer and token, its
per-layer state kept between tokens, for two requests batches of different sizes.

`skel capture --entry examples/capture_demo/kernel.py -o DIR -- python examples/capture_demo/model.py`
records these calls and writes DIR/spec.py.
"""
import torch

from kernel import decay_step

H, D, LAYERS, TOKENS = 2, 32, 2, 3
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


class ToyDecoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.ModuleList(torch.nn.Linear(D, D) for _ in range(LAYERS))
        self.gate = torch.nn.ModuleList(torch.nn.Linear(D, 1) for _ in range(LAYERS))

    @torch.no_grad()
    def step(self, h: torch.Tensor, states: list[torch.Tensor]) -> torch.Tensor:
        """h [B, H, D] -> [B, H, D]; each layer's state [B, H, D] is updated in place by the kernel."""
        for proj, gate, state in zip(self.proj, self.gate, states):
            x = proj(h)
            h = h + decay_step(x, gate(x).squeeze(-1), state, eps=1e-6)
        return h


def main() -> None:
    torch.manual_seed(0)
    model = ToyDecoder().to(DEVICE)
    for batch in (2, 3):
        states = [torch.zeros(batch, H, D, device=DEVICE) for _ in range(LAYERS)]
        h = torch.randn(batch, H, D, device=DEVICE)
        for _ in range(TOKENS):
            h = model.step(h, states)
        print(f"batch {batch}: |h| = {h.norm():.4f}")


if __name__ == "__main__":
    main()
