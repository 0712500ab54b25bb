"""Device selection shared by every trainer."""

import torch

__all__ = ["resolve_device"]


def resolve_device(device: str = "auto") -> torch.device:
    """"auto" -> CUDA when available, else CPU; "cuda" without a GPU is an error."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError("device='cuda' was requested but no CUDA device is available; use 'auto' or 'cpu'")
    return torch.device(device)
