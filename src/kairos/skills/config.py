"""Configuration of the skills extension (the ``[skills]`` table of ``kairos.toml``)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

DEFAULT_DIRS = (".kairos/skills", "skills")


class SkillsConfig(BaseModel):
    """Where skills come from and which of them are trusted without an approval.

    Example::

        [skills]
        dirs = [".kairos/skills", "skills", "~/shared-skills"]
        trust_builtin = true
    """

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(True, description="offer skills: the catalog message, load_skill and read_skill_file")
    dirs: list[str] = Field(
        default_factory=lambda: list(DEFAULT_DIRS),
        description="skill folders, relative to the workspace or absolute; earlier ones win on a name clash. "
        "Folders inside the workspace are the owner's (trusted); folders outside it need approval",
    )
    builtin: bool = Field(True, description="offer the skills shipped with kairos")
    entry_points: bool = Field(True, description="offer skills of installed packages (entry points kairos.skills)")
    trust_workspace: bool = Field(True, description="skills inside the workspace need no approval")
    trust_builtin: bool = Field(True, description="skills shipped with kairos need no approval")
    max_file_chars: int = Field(20_000, ge=1_000, description="read_skill_file returns at most this many characters")
    rescan_s: float = Field(
        1.0,
        ge=0,
        description="skill folders are walked at most this often (the catalog is checked before each request)",
    )
