"""The structured system prompt builder: byte-stable static part, design rules enforced."""

from __future__ import annotations

from pathlib import Path

import pytest

from kairos.app import default_system_prompt
from kairos.config import KairosConfig
from kairos.plugins.subagents import FROM_MAIN, FROM_USER, TOOL_RESULT
from kairos.prompts import load_prompt
from kairos.prompts.builder import (
    DEFAULT_TASK_TYPE,
    KAIROS_SPEC,
    SUBAGENT_SPEC,
    Branch,
    Deployment,
    Example,
    PromptBuilder,
    PromptSpec,
    PromptSpecError,
    Rule,
    Section,
    Step,
    default_prompt,
)

EXAMPLES = {
    DEFAULT_TASK_TYPE: (Example("Say hi.", ('Final answer: "hi"',)),),
    "refund": (
        Example("Refund order 7.", ('lookup_order(id=7) → "paid 20 USD"', 'refund(id=7) → "ok"'), note="Verify first."),
        Example("Refund order 9 (unpaid).", ('lookup_order(id=9) → "unpaid"', 'Final answer: "Nothing to refund."')),
    ),
}


def spec(**kw: object) -> PromptSpec:
    base: dict[str, object] = {
        "identity": "You are a billing assistant.",
        "workflow": (
            Step("Verify the caller's identity.", (Branch("verification fails", "stop and say so"),)),
            Step("Classify the request."),
        ),
        "rules": (Rule("the request is a refund or a cancellation", "use the fixed_fee type"), "Amounts are in USD."),
        "examples": EXAMPLES,
    }
    base.update(kw)
    return PromptSpec(**base)  # type: ignore[arg-type]


def test_default_spec_renders_the_bundled_prompt_byte_for_byte() -> None:
    assert PromptBuilder(KAIROS_SPEC).static() == load_prompt("system")


def test_default_prompt_equals_the_app_prompt(tmp_path: Path) -> None:
    config = KairosConfig(instructions="Answer in French.")
    assert default_prompt(tmp_path, instructions=config.instructions) == default_system_prompt(tmp_path, config)


def test_static_part_is_identical_across_installs_and_deployment_differs(tmp_path: Path) -> None:
    a, b = tmp_path / "alice-ws", tmp_path / "bob-ws"
    pa = default_prompt(a, instructions="Alice's rules.")
    pb = default_prompt(b, notices=("A fixed notice.",))
    assert pa.static == pb.static
    assert "Alice's rules." in pa.deployment
    assert pb.deployment.endswith("A fixed notice.")
    assert "alice" not in pa.static.lower()


def test_system_part_names_no_workspace_so_workspaces_share_its_kv_state(tmp_path: Path) -> None:
    a, b = default_prompt(tmp_path / "alice-ws"), default_prompt(tmp_path / "bob-ws")
    assert (a.static, a.deployment) == (b.static, b.deployment)
    assert "alice" not in a.deployment.lower()


def test_structure_xml_sections_sop_steps_and_exact_rules() -> None:
    text = PromptBuilder(spec()).static()
    assert text.startswith("You are a billing assistant.\n\n<workflow>\n1. Verify the caller's identity.\n")
    assert "   - If verification fails → stop and say so" in text
    assert "2. Classify the request.\n</workflow>" in text
    assert "- When the request is a refund or a cancellation: use the fixed_fee type." in text
    assert "- Amounts are in USD.\n</rules>" in text
    assert text.index("<workflow>") < text.index("<example>") < text.index("<rules>")


def test_few_shot_set_is_chosen_once_by_task_type_and_byte_stable() -> None:
    builder = PromptBuilder(spec())
    refund = builder.build("dep", task_type="refund")
    assert refund.static.count("<example>") == 2 and "Refund order 9" in refund.static
    again = PromptBuilder(spec()).build("other deployment", task_type="refund")
    assert again.static == refund.static  # a fresh builder, another deployment: same bytes
    assert builder.static("refund") is builder.static("refund")  # rendered once, reused verbatim
    default = builder.static()
    assert "Say hi." in default and "Refund order" not in default
    assert builder.static("unknown-type") == default  # falls back to the default set, not a retrieval
    assert builder.task_types() == ["default", "refund"]


def test_sections_are_placed_by_layout() -> None:
    s = spec(sections=(Section("tone", "- Be brief."),), layout=("tone", "workflow", "rules"))
    text = PromptBuilder(s).static()
    assert text.index("<tone>\n- Be brief.\n</tone>") < text.index("<workflow>")
    assert "<example>" not in text
    with pytest.raises(PromptSpecError, match="not placed"):
        PromptBuilder(spec(sections=(Section("tone", "x"),))).static()
    with pytest.raises(PromptSpecError, match="neither"):
        PromptBuilder(spec(layout=("workflow", "nonsense"))).static()
    with pytest.raises(PromptSpecError, match="lower_snake_case"):
        Section("Bad Tag", "x")


def test_install_specific_values_are_refused_in_the_static_part(tmp_path: Path) -> None:
    leaky = spec(identity=f"You work in {tmp_path}.")
    with pytest.raises(PromptSpecError, match="deployment part"):
        PromptBuilder(leaky, volatile=(str(tmp_path),)).static()
    # the same value in the deployment part is fine
    assert str(tmp_path) in PromptBuilder(spec(), volatile=(str(tmp_path),)).build(str(tmp_path)).deployment


def test_vague_business_rules_are_refused() -> None:
    with pytest.raises(PromptSpecError, match="vague"):
        Rule("the situation requires it", "choose the billing type as appropriate")
    with pytest.raises(PromptSpecError, match="vague"):
        Rule("the saving is reasonable", "charge a commission")
    assert Rule("estimated success is below 30%", "reject the task.").render() == (
        "When estimated success is below 30%: reject the task."
    )


def test_overused_emphasis_is_refused() -> None:
    shouting = spec(rules=("NEVER a.", "NEVER b.", "ALWAYS c.", "MUST d."))
    with pytest.raises(PromptSpecError, match="emphasis"):
        PromptBuilder(shouting).static()
    PromptBuilder(spec(rules=("NEVER use percentage_based_one_time for refunds.",))).static()


def test_more_examples_than_the_cap_are_refused() -> None:
    many = {DEFAULT_TASK_TYPE: tuple(Example(f"t{i}", ("x",)) for i in range(4))}
    with pytest.raises(PromptSpecError, match="at most 3"):
        PromptBuilder(spec(examples=many)).static()


def test_deployment_orders_facts_instructions_notices() -> None:
    d = Deployment(("Workspace: w.",), "  Be terse.  ", ("Warning sentence.", ""))
    assert d.render() == "Workspace: w.\nBe terse.\nWarning sentence."
    assert Deployment().render() == ""


def test_subagent_prompt_explains_every_source_tag() -> None:
    text = PromptBuilder(SUBAGENT_SPEC).static()
    for tag in (FROM_MAIN, FROM_USER, TOOL_RESULT):
        assert tag in text
    assert text.startswith("You are a sub-agent") and "<workflow>" in text and "<rules>" in text
