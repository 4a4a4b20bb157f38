"""The whole demo through the product's agent: search, fill the checkout form, place the order with the user's yes."""

from __future__ import annotations

import re
from pathlib import Path

from kairos.app import build_agent
from kairos.browser.act import looks_irreversible
from kairos.browser.config import BrowserConfig
from kairos.browser.page import Element
from kairos.config import KairosConfig
from kairos.context.session import SessionStore
from kairos.models.types import ModelRequest, ModelResponse, ToolCall
from kairos.security.approval import ApprovalRequest, CallbackApprover
from kairos.testing import ScriptedModel, call, reply

from .conftest import chromium_available


def number(request: ModelRequest, name: str) -> int:
    """The number the page gave the element called ``name``, from the newest look that lists it."""
    for message in reversed(request.messages):
        if message.role == "tool" and (found := re.search(r"\[(\d+)\] [^\"\n]+ \"" + re.escape(name), message.content)):
            return int(found.group(1))
    raise AssertionError(f"no element called {name!r} on any page")


def latest(request: ModelRequest) -> str:
    return next(m.content for m in reversed(request.messages) if m.role == "tool")


def act(tool: str, name: str, **args: object) -> object:
    return lambda r: reply("", call(tool, {"index": number(r, name), **args}))


def confirm(r: ModelRequest) -> ModelResponse:
    token = re.search(r'"confirm_token": "([A-Za-z0-9_-]+)"', latest(r))
    assert token, latest(r)
    return reply("", call("confirm_click", {"index": number(r, "Place order"), "confirm_token": token.group(1)}))


async def test_the_agent_buys_a_kettle_and_the_order_waits_for_the_users_yes(workspace: Path, demo_site: str) -> None:
    chromium_available()
    asked: list[ApprovalRequest] = []

    def user(request: ApprovalRequest) -> bool:
        asked.append(request)
        return True

    model = ScriptedModel([
        act("type_text", "Search products", text="travel kettle", press_enter=True),
        act("click", "Compact Travel Kettle"),
        act("click", "Add to cart"),
        act("click", "Go to cart and checkout"),
        act("type_text", "Full name", text="Ada Lovelace"),
        act("type_text", "Email", text="ada@example.org"),
        act("type_text", "Delivery address", text="12 Analytical Row, London"),
        act("click", "I accept the terms"),
        act("click", "Place order"),  # refused: it pays; the result points to confirm_click
        act("confirm_click", "Place order"),  # a preview and a one-time token
        confirm,  # the user is asked, says yes, and the order goes through
        lambda r: reply(re.search(r"Order number (\S+) is confirmed", latest(r)).group(0)),  # type: ignore[union-attr]
    ])  # fmt: skip
    config = KairosConfig().model_copy(update={"browser": BrowserConfig(allow_hosts=("127.0.0.1",))})
    config = config.model_copy(
        update={"tools": config.tools.model_copy(update={"builtins": (), "toolsets": ("browser",)})}
    )
    agent = build_agent(model, workspace, config, approver=CallbackApprover(user))
    store = SessionStore(workspace)
    session = store.new()
    try:
        opening = [ToolCall("open_start_page", "open_url", f'{{"url": "{demo_site}/"}}')]
        events = [e async for e in agent.run(session, "Buy the Compact Travel Kettle for Ada Lovelace.", opening)]
    finally:
        await session.aclose()
        store.close()
    results = [m.content for m in model.requests[-1].messages if m.role == "tool"]
    place = next(r for r in results if "Place order" in r and "Not clicked" in r)
    assert "confirm_click" in place  # click alone never pays
    assert [a.tool for a in asked] == ["confirm_click"]  # exactly one question to the user: the order itself
    # the user is told what would be clicked, where: not just an element number
    assert 'button "Place order" on the page \'Cart and checkout' in asked[0].reason, asked[0].reason
    assert "Thank you for your order" in results[-1]
    answer = events[-1]
    assert re.fullmatch(r"Order number \S+ is confirmed", getattr(answer, "text", "")), answer


def test_what_counts_as_irreversible_by_label_and_role() -> None:
    def element(role: str, name: str) -> Element:
        return Element(1, role, name)

    irreversible = [("button", "Place order"), ("button", "Pay £24.99"), ("button", "Buy now"),
                    ("button", "Delete account"), ("link", "Delete this draft"), ("link", "Unsubscribe")]  # fmt: skip
    for role, name in irreversible:
        assert looks_irreversible(element(role, name)), (role, name)
    for role, name in [("link", "Go to cart and checkout"), ("button", "Proceed to checkout"), ("link", "Buy now"),
                       ("link", "Send a parcel"), ("button", "Add to cart"), ("button", "Search")]:  # fmt: skip
        assert not looks_irreversible(element(role, name)), (role, name)
    assert not looks_irreversible(None)
