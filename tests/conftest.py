"""Test-session settings.

The suite works on small matrices, where torch's intra-op threads only add synchronisation cost
(and thrash badly when the 2-core CI machine is busy), so tests use one thread.
"""

import torch

torch.set_num_threads(1)
