"""LangChain's own standard integration suites (``langchain-tests``) for ChatOpenAI and
ChatAnthropic, run against ``ledger gateway`` in front of the simulator on loopback:
what LangChain's maintainers check a chat model integration does (invoke, stream,
batch, usage metadata, tool calling, structured output, JSON mode, agent loops) holds
through the gateway. Also with the wires crossed: ChatOpenAI on a model served by
Anthropic, ChatAnthropic on one served by OpenAI.

Only tests that fetch files from the internet are skipped, each with its reason
(tests/frameworks/conftest.py: the suite forbids overriding its tests to skip them).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

import pytest
from langchain_anthropic import ChatAnthropic
from langchain_core.language_models import BaseChatModel
from langchain_openai import ChatOpenAI
from langchain_tests.integration_tests import ChatModelIntegrationTests

from ledger.gateway import GatewayApp, parse_config
from ledger.simulator import Simulator, VirtualClock, serve_in_thread
from tests.gateway.conftest import KEY, _serve, sim_table
from tests.llm_loopback import Rows

pytestmark = [
    pytest.mark.slow,
    # The frameworks' own deprecations are not under test (filterwarnings is "error").
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::PendingDeprecationWarning"),
    # The integrations' own warnings, which they give against the real providers too.
    pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning"),
    pytest.mark.filterwarnings("ignore:Received a Pydantic BaseModel V1 schema:UserWarning"),
    # One event loop for the module's async tests: the integrations keep one pooled async
    # HTTP client per base URL for the process (functools caches), as fits an application
    # with one loop; a loop per test would leave them with connections of a closed loop.
    # The mark reaches the suites' sync tests too, which pytest-asyncio warns about.
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.filterwarnings(
        "ignore:The test <Function .* is marked with '@pytest.mark.asyncio'"
    ),
]

#: Each model name the suites use, and the gateway route behind it.
MODELS: dict[str, list[str]] = {
    "gpt-4o-mini": ["openai:gpt-4o-mini"],
    "claude-haiku": ["anthropic:claude-haiku-4-5-20251001"],
    "via-anthropic": ["anthropic:claude-haiku-4-5-20251001"],
    "via-openai": ["openai:gpt-4o-mini"],
    # The suites' model override asks for a name the answer's model contains.
    "claude-haiku-4-5": ["anthropic:claude-haiku-4-5-20251001"],
}


@pytest.fixture(scope="module")
def gateway() -> Iterator[tuple[str, Rows]]:
    """The gateway in front of the simulator; its URL and the rows it records."""
    rows = Rows()
    simulator = Simulator(clock=VirtualClock(), seed=11)
    with serve_in_thread(simulator) as sim_url, pytest.MonkeyPatch.context() as env:
        env.setenv("GW_OPENAI_KEY", "sk-provider-openai-secret-0001")
        env.setenv("GW_ANTHROPIC_KEY", "sk-ant-provider-secret-0002")
        env.setenv("GW_OPENROUTER_KEY", "sk-or-provider-secret-0003")
        app = GatewayApp(parse_config(sim_table(sim_url, models=MODELS)), rows)
        served = _serve(app)
        yield next(served).url, rows
        for _ in served:
            pass


class _ThroughGateway(ChatModelIntegrationTests):
    """Points the suite's model at the gateway."""

    url: ClassVar[str] = ""
    model_name: ClassVar[str]

    @pytest.fixture(autouse=True)
    def _gateway(self, gateway: tuple[str, Rows]) -> Iterator[None]:
        type(self).url = gateway[0]
        before = len(gateway[1].events)
        yield
        # Every call the suite made through the gateway and got an answer to is a row with
        # tokens.
        answered = [e for e in gateway[1].events[before:] if e.status == "ok"]
        assert all(e.input_tokens > 0 and e.output_tokens > 0 for e in answered)

    @property
    def returns_usage_metadata(self) -> bool:
        return True


class _OpenAIWire(_ThroughGateway):
    @property
    def chat_model_class(self) -> type[BaseChatModel]:
        return ChatOpenAI

    @property
    def chat_model_params(self) -> dict[str, Any]:
        return {
            "model": self.model_name,
            "base_url": self.url + "/v1",
            "api_key": KEY,
            "stream_usage": True,
        }

    @property
    def supports_json_mode(self) -> bool:
        return True  # response_format json_object (ChatAnthropic has no JSON mode)

    @property
    def model_override_value(self) -> str:
        return "claude-haiku-4-5"


class _AnthropicWire(_ThroughGateway):
    @property
    def chat_model_class(self) -> type[BaseChatModel]:
        return ChatAnthropic

    @property
    def chat_model_params(self) -> dict[str, Any]:
        return {"model": self.model_name, "base_url": self.url, "api_key": KEY}

    @property
    def model_override_value(self) -> str:
        return "gpt-4o-mini"

    @property
    def supports_anthropic_inputs(self) -> bool:
        return True  # image inputs off (a download): its test sends tools and cache_control


class TestChatOpenAI(_OpenAIWire):
    model_name = "gpt-4o-mini"


class TestChatAnthropic(_AnthropicWire):
    model_name = "claude-haiku"


class TestChatOpenAIServedByAnthropic(_OpenAIWire):
    model_name = "via-anthropic"


class TestChatAnthropicServedByOpenAI(_AnthropicWire):
    model_name = "via-openai"
