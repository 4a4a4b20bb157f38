"""Agent skills: on-demand instruction packages with progressive disclosure (book ch2 §3.9).

``Skills.from_config(workspace, SkillsConfig())`` is the extension to give an ``Agent``;
``SkillCatalog`` finds skills and decides trust; ``kairos skills`` (``kairos.cli.skills``) lists,
shows, approves, revokes and scaffolds them.
"""

from __future__ import annotations

from kairos.skills.catalog import (
    ApprovalStore,
    Skill,
    SkillCatalog,
    SkillEntry,
    SkillFormatError,
    SkillRoot,
    builtin_root,
    parse_skill_md,
)
from kairos.skills.config import SkillsConfig

__all__ = [
    "ApprovalStore",
    "Skill",
    "SkillCatalog",
    "SkillEntry",
    "SkillFormatError",
    "SkillRoot",
    "SkillsConfig",
    "builtin_root",
    "parse_skill_md",
]
