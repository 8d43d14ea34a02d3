"""Attack: import another submission's answer from the same folder."""
from solution import entropy_bound_accept  # noqa: F401
