"""The host a card was measured on, torch-free: its fields, and whether two cards' differences follow
the host rather than the GPU.

A card records its host under "host" (measure.card_host: the CPU model, the cores, the frequency
governor, the Python and torch builds); a card recorded before that holds only the fingerprint's
python, platform and cpu fields, which are read as the same host fields where present.
HOST_SIDE_RULE is the rule, stated once: two cards of the same GPU and driver whose host fields differ
have every difference between them marked host-side.
"""
from __future__ import annotations

# host field -> what it is (the order the comparison names them in)
HOST_FIELDS = {
    "cpu_model": "CPU model", "cores": "CPU cores the process may use", "governor": "frequency governor",
    "python": "Python", "python_build": "Python build", "torch": "torch", "torch_build": "torch build",
    "kernel": "OS kernel",
}
# older cards: host field -> the fingerprint field it was recorded as
_FROM_FINGERPRINT = {"python": "python", "torch": "torch", "kernel": "platform"}
UNKNOWN = "unknown"
HOST_SIDE_RULE = ("host-side: where two cards have the same GPU and driver but a host field differs (CPU model, "
                  "cores, frequency governor, Python or torch build, OS kernel; a field unknown on either card is "
                  "not compared), each cell that differs between them is marked host-side: the GPU is the same, so "
                  "the difference follows the host or the software around it.")


def host_of(card: dict) -> dict:
    """The card's host fields (HOST_FIELDS), UNKNOWN where the card does not say."""
    fp = card.get("fingerprint") or {}
    host = card.get("host") if isinstance(card.get("host"), dict) else {}
    out = {}
    for k in HOST_FIELDS:
        v = host.get(k)
        if v in (None, "") and k in _FROM_FINGERPRINT:
            v = fp.get(_FROM_FINGERPRINT[k])
        out[k] = UNKNOWN if v in (None, "") else str(v)
    return out


def same_gpu(a: dict, b: dict) -> bool:
    """Both cards of one GPU model and driver (the fingerprint's gpu and driver)."""
    fa, fb = a.get("fingerprint") or {}, b.get("fingerprint") or {}
    return all(str(fa.get(k)) == str(fb.get(k)) and fa.get(k) is not None for k in ("gpu", "driver"))


def host_differences(a: dict, b: dict) -> list[str]:
    """The host fields known on both cards that differ, in words ("frequency governor: performance vs
    powersave"); [] when the GPUs or drivers differ (the difference is then not the host's alone)."""
    if not same_gpu(a, b):
        return []
    ha, hb = host_of(a), host_of(b)
    return [f"{HOST_FIELDS[k]}: {ha[k]} vs {hb[k]}" for k in HOST_FIELDS
            if UNKNOWN not in (ha[k], hb[k]) and ha[k] != hb[k]]


def host_side(a: dict, b: dict) -> bool:
    """HOST_SIDE_RULE: the two cards' differences follow the host."""
    return bool(host_differences(a, b))


def host_in_words(card: dict) -> str:
    h = host_of(card)
    return "; ".join(f"{HOST_FIELDS[k]} {h[k]}" for k in HOST_FIELDS)
