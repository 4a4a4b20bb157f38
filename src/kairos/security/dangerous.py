"""Dangerous-command detection: shell (or Python) text that could destroy data or run unseen code.

A finding does not refuse the call by itself: the permission check routes it to review
(``ask``) with the finding as the reason, so the user sees *why* they are asked. Patterns are
deliberately broad (a false alarm costs one question; a miss can cost a disk). The sandbox is the
real boundary; this is a second look at what the model is about to do.
"""

from __future__ import annotations

import re

_DIRS = r"bin|boot|dev|etc|home|lib\w*|opt|proc|root|sbin|srv|sys|usr|var"
_SYSTEM = rf"(?:/|/\*|~/?|~/\*|\$HOME/?|\$\{{HOME\}}/?|\*|\.\.?/?|/(?:{_DIRS})\b\S*)"
_END = r"(?=$|[\s;&|)'\"])"

PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (reason, re.compile(rx, re.IGNORECASE | re.MULTILINE))
    for reason, rx in (
        (
            "recursive delete of / , ~, * or a system folder",
            rf"\brm\s+(?:-{{1,2}}[\w-]+\s+)*(?:-\w*[rR]\w*|--recursive)(?:\s+-{{1,2}}[\w-]+)*\s+(?:\S+\s+)*?{_SYSTEM}{_END}",
        ),
        ("rm --no-preserve-root", r"--no-preserve-root"),
        ("find … -delete on / or ~", r"\bfind\s+(?:/|~/?|\$HOME/?)\s.*-delete\b"),
        ("dd writing to a device", r"\bdd\b[^\n;|&]*\bof=/dev/(?!null\b|zero\b|stdout\b|stderr\b)"),
        ("redirect onto a disk device", r">\s*/dev/(?:sd|hd|vd|xvd|nvme|mmcblk|disk|md|dm-)\w*"),
        ("formatting a filesystem (mkfs)", r"\bmkfs(?:\.\w+)?\b"),
        ("wiping a disk", r"\b(?:wipefs|shred\s+[^\n]*?/dev/|blkdiscard|fdisk|parted|sfdisk)\b"),
        ("fork bomb", r"(\w+|:)\s*\(\s*\)\s*\{[^}]*\1\s*\|\s*\1\s*&"),
        ("a fork bomb in Python", r"while\s+True\s*:\s*\n?\s*os\.fork\(\)"),
        (
            "downloaded code piped into an interpreter",
            r"\b(?:curl|wget|fetch)\b[^\n;]*\|\s*(?:sudo\s+)?(?:ba|z|da|k|fi)?sh\b|"
            r"\b(?:curl|wget)\b[^\n;]*\|\s*(?:sudo\s+)?(?:python\d?|perl|ruby|node)\b",
        ),
        (
            "downloaded code run through process substitution",
            r"\b(?:ba|z)?sh\s+<\(\s*(?:curl|wget)\b|eval\s+\"?\$\(\s*(?:curl|wget)\b",
        ),
        ("chmod/chown of / or a system folder", rf"\bch(?:mod|own|grp)\s+(?:-\w+\s+)*(?:\S+\s+)?{_SYSTEM}{_END}"),
        (
            "world-writable recursive chmod",
            r"\bchmod\s+(?:-\w*R\w*\s+)(?:0?777|a\+rwx)\b|\bchmod\s+(?:0?777|a\+rwx)\s+-R\b",
        ),
        ("force push", r"\bgit\s+(?:-\S+\s+)*push\b[^\n;|&]*(?:\s--force(?:-with-lease)?\b|\s-\w*f\w*\b|\s\+\S+)"),
        ("discards uncommitted work (git reset --hard / git clean -f)", r"\bgit\s+(?:reset\s+--hard|clean\s+-\w*f)"),
        (
            "deleting a branch or history",
            r"\bgit\s+(?:branch\s+-D|push\s+\S+\s+--delete|push\s+\S+\s+:\S+|filter-branch)\b",
        ),
        ("privilege escalation (sudo/su/doas)", r"(?:^|[;&|(]\s*|\s)(?:sudo|doas|su)\s"),
        ("powering off or rebooting", r"\b(?:shutdown|reboot|halt|poweroff|init\s+[06])\b"),
        ("killing every process", r"\bkill\s+(?:-\w+\s+)*-1\b|\bkillall\b|\bpkill\s+-9\b"),
        ("deleting the crontab", r"\bcrontab\s+-r\b"),
        ("overwriting a shell start-up file", r">\s*~?/?[\w./-]*\.(?:bashrc|zshrc|profile|bash_profile)\b"),
        ("Python deleting a whole tree at / or ~", r"shutil\.rmtree\(\s*['\"](?:/|~|/home|/etc|/usr)['\"/]"),
    )
)


def dangerous(text: str) -> list[str]:
    """Why ``text`` looks dangerous: one reason per kind found (empty when nothing was)."""
    return [reason for reason, rx in PATTERNS if rx.search(text)]


__all__ = ["PATTERNS", "dangerous"]
