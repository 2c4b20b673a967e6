"""Assistants: tool policies, and the validation of what a client sends."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from parley.conversations.assistants import (
    Assistant,
    AssistantCreate,
    AssistantMemory,
    AssistantUpdate,
    RegexRule,
    resolve_tool_policy,
    sampling_settings,
    transformer_settings,
)


def assistant(**policies: str) -> Assistant:
    return Assistant(id="asst_1", owner="o", name="a", tool_policies=policies)  # type: ignore[arg-type]


# --- resolve_tool_policy -------------------------------------------------------------------


def test_nothing_configured_runs_the_tool() -> None:
    assert resolve_tool_policy(None, {}, "shell") == "auto"
    assert resolve_tool_policy(assistant(), {}, "shell") == "auto"


def test_the_configured_policy_applies_without_an_assistant_policy() -> None:
    configured = {"shell": "ask", "mcp__*": "deny"}
    assert resolve_tool_policy(None, configured, "shell") == "ask"
    assert resolve_tool_policy(assistant(web_fetch="deny"), configured, "shell") == "ask"
    assert resolve_tool_policy(None, configured, "mcp__github__issues") == "deny"
    assert resolve_tool_policy(None, configured, "web_fetch") == "auto"


def test_the_stricter_of_assistant_and_configuration_stands() -> None:
    # an assistant (any key holder's) cannot loosen what the operator configured
    assert resolve_tool_policy(assistant(shell="auto"), {"shell": "ask"}, "shell") == "ask"
    assert resolve_tool_policy(assistant(**{"*": "auto"}), {"shell": "deny"}, "shell") == "deny"
    # and may tighten it
    assert resolve_tool_policy(assistant(shell="deny"), {"shell": "auto"}, "shell") == "deny"
    assert resolve_tool_policy(assistant(**{"sh*": "ask"}), {"shell": "auto"}, "shell") == "ask"
    assert resolve_tool_policy(assistant(shell="ask"), {}, "shell") == "ask"


def test_exact_names_beat_globs() -> None:
    policies = {"*": "deny", "shell": "auto", "sh*": "ask"}
    assert resolve_tool_policy(assistant(**policies), {}, "shell") == "auto"
    assert resolve_tool_policy(None, policies, "shell") == "auto"
    assert resolve_tool_policy(None, policies, "shelter") == "ask"
    assert resolve_tool_policy(None, policies, "web_fetch") == "deny"


def test_the_most_specific_glob_wins_and_ties_go_to_the_stricter() -> None:
    configured = {"mcp__*": "auto", "mcp__github__*": "ask", "*__delete*": "deny"}
    assert resolve_tool_policy(None, configured, "mcp__github__issues") == "ask"
    assert resolve_tool_policy(None, configured, "mcp__slack__post") == "auto"
    # "mcp__github__*" (13 literal characters) beats "*__delete*" (8)
    assert resolve_tool_policy(None, configured, "mcp__github__delete_repo") == "ask"
    assert resolve_tool_policy(None, {"a*": "auto", "*b": "deny"}, "ab") == "deny"
    assert resolve_tool_policy(None, {"ab*": "ask", "[ab]b?": "deny"}, "abc") == "ask"


def test_globs_are_case_sensitive() -> None:
    assert resolve_tool_policy(None, {"Shell*": "deny"}, "shell") == "auto"


def test_a_configured_value_that_is_no_policy_is_an_error() -> None:
    with pytest.raises(ValueError, match="not a tool policy"):
        resolve_tool_policy(None, {"shell": "maybe"}, "shell")


# --- validation ----------------------------------------------------------------------------


def first_error(
    body: dict[str, Any], model: type[AssistantCreate | AssistantUpdate] = AssistantCreate
) -> tuple[tuple[Any, ...], str]:
    with pytest.raises(ValidationError) as caught:
        model.model_validate(body)
    error = caught.value.errors()[0]
    return tuple(error["loc"]), error["msg"]


def test_a_minimal_assistant_has_the_defaults() -> None:
    fields = AssistantCreate.model_validate({"name": "  Helper  "}).fields()
    assert fields["name"] == "Helper"
    built = Assistant(id="asst_1", owner="o", **fields)
    assert built == Assistant(
        id="asst_1", owner="o", name="Helper", transformers=fields["transformers"]
    )
    assert built.memory == AssistantMemory(enabled=False, retrieval=False, scope="assistant")
    assert (built.generate_titles, built.generate_suggestions) == (True, True)
    assert transformer_settings(built) == transformer_settings(None)
    assert transformer_settings(built).documents is True
    assert sampling_settings(built).temperature is None


def test_fields_are_typed_as_the_assistant_stores_them() -> None:
    fields = AssistantCreate.model_validate(
        {
            "name": "coder",
            "model": "fast",
            "sampling": {"temperature": 0.2, "max_tokens": 500, "stop": ["END"]},
            "reasoning_effort": "max",
            "tools": ["web_fetch", "web_fetch", "shell"],
            "tool_policies": {"shell": "ask", "mcp__*": "deny"},
            "knowledge_bases": ["kb_1"],
            "memory": {"enabled": True, "retrieval": True, "scope": "global"},
            "regex_rules": [{"pattern": r"(\d+)", "replacement": r"<\1>", "roles": ["user"]}],
            "transformers": {
                "time_reminder": True,
                "prompt_injections": [{"content": "Be brief.", "position": "top"}],
                "lorebook": [{"keywords": ["dragon"], "content": "Dragons breathe fire."}],
                "template": "{{ message }}",
            },
            "generate_suggestions": False,
        }
    ).fields()
    assert fields["sampling"] == {"temperature": 0.2, "max_tokens": 500, "stop": ["END"]}
    assert fields["tools"] == ("web_fetch", "shell")
    assert fields["memory"] == AssistantMemory(True, True, "global")
    assert fields["regex_rules"] == (RegexRule(r"(\d+)", r"<\1>", ("user",), False),)
    assert fields["transformers"]["lorebook"][0]["scan_depth"] == 4
    assert fields["transformers"]["prompt_injections"][0]["role"] == "system"
    built = Assistant(id="asst_1", owner="o", **fields)
    settings = transformer_settings(built)
    assert settings.time_reminder
    assert settings.template == "{{ message }}"
    assert settings.lorebook[0].keywords == ["dragon"]
    assert sampling_settings(built).max_tokens == 500


def test_an_update_carries_only_the_fields_sent() -> None:
    assert AssistantUpdate.model_validate({}).fields() == {}
    fields = AssistantUpdate.model_validate({"model": None, "memory": {"enabled": True}}).fields()
    assert fields == {"model": None, "memory": AssistantMemory(enabled=True)}


@pytest.mark.parametrize(
    ("body", "loc", "message"),
    [
        ({}, ("name",), "Field required"),
        ({"name": ""}, ("name",), "at least 1 character"),
        ({"name": "asst_007"}, ("name",), "may not start with 'asst_'"),
        ({"name": "a/b"}, ("name",), "may not hold '/'"),
        ({"name": "a", "colour": "red"}, ("colour",), "Extra inputs"),
        ({"name": "a", "sampling": {"top_k": 5}}, ("sampling", "top_k"), "Extra inputs"),
        ({"name": "a", "sampling": {"temperature": 3}}, ("sampling", "temperature"), "less"),
        ({"name": "a", "reasoning_effort": "extreme"}, ("reasoning_effort",), "'max'"),
        (
            {"name": "a", "tool_policies": {"shell": "sometimes"}},
            ("tool_policies", "shell"),
            "'deny'",
        ),
        ({"name": "a", "tools": ["two words"]}, ("tools", 0), "pattern"),
        ({"name": "a", "memory": {"scope": "team"}}, ("memory", "scope"), "'global'"),
        (
            {"name": "a", "regex_rules": [{"pattern": "ok"}, {"pattern": "(unclosed"}]},
            ("regex_rules", 1, "pattern"),
            "invalid regular expression: missing )",
        ),
        (
            {"name": "a", "regex_rules": [{"pattern": "(a)", "replacement": r"\2"}]},
            ("regex_rules", 0, "replacement"),
            "invalid group reference 2",
        ),
        (
            {"name": "a", "regex_rules": [{"pattern": "(?P<x>a)", "replacement": r"\g<y>"}]},
            ("regex_rules", 0, "replacement"),
            "unknown group name 'y'",
        ),
        (
            {"name": "a", "regex_rules": [{"pattern": "a", "roles": ["system"]}]},
            ("regex_rules", 0, "roles", 0),
            "'assistant'",
        ),
        (
            {"name": "a", "regex_rules": [{"pattern": "a", "roles": []}]},
            ("regex_rules", 0, "roles"),
            "at least 1 item",
        ),
        (
            {"name": "a", "transformers": {"ocr": True}},
            ("transformers", "ocr"),
            "Extra inputs",
        ),
        (
            {"name": "a", "transformers": {"lorebook": [{"use_regex": True, "keywords": ["["]}]}},
            ("transformers", "lorebook", 0, "keywords"),
            "keyword 0 is not a valid regular expression",
        ),
        (
            {"name": "a", "transformers": {"prompt_injections": [{"position": "middle"}]}},
            ("transformers", "prompt_injections", 0, "position"),
            "'at_depth'",
        ),
    ],
)
def test_invalid_bodies_name_the_field(
    body: dict[str, Any], loc: tuple[Any, ...], message: str
) -> None:
    found_loc, found_message = first_error(body)
    assert found_loc == loc
    assert message in found_message


def test_an_update_refuses_null_where_a_field_cannot_be_empty() -> None:
    assert first_error({"name": None}, AssistantUpdate)[0] == ("name",)
    assert first_error({"tools": None}, AssistantUpdate)[0] == ("tools",)
    assert AssistantUpdate.model_validate({"reasoning_effort": None}).fields() == {
        "reasoning_effort": None
    }


def test_regex_keywords_are_plain_text_unless_marked() -> None:
    body = {"name": "a", "transformers": {"lorebook": [{"keywords": ["(not a regex"]}]}}
    assert AssistantCreate.model_validate(body).fields()["transformers"]["lorebook"][0]


def test_remembering_and_forgetting_ask_unless_confirmation_is_off() -> None:
    from parley.conversations.assistants import tool_policies

    tools = ("memory_remember", "memory_forget", "memory_recall", "kb_search")
    assert tool_policies(tools, None, {}, confirm_remember=True) == {
        "memory_remember": "ask",
        "memory_forget": "ask",
    }
    assert tool_policies(tools, None, {}, confirm_remember=False) == {}
    # configuration may only make them stricter
    assert tool_policies(tools, None, {"memory_*": "deny"}, confirm_remember=True) == {
        "memory_remember": "deny",
        "memory_forget": "deny",
        "memory_recall": "deny",
    }
