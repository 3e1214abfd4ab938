"""A scripted chat client for the model path: Agent Framework's own ``BaseChatClient`` with canned replies.

A fake is unavoidable here (no model runs on this machine); it stands exactly where the Azure OpenAI
client stands, so the ``Agent``, its structured-output parsing and everything after it are real.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agent_framework import BaseChatClient, ChatResponse, FunctionInvocationLayer, Message


class _ScriptedClient(BaseChatClient):  # type: ignore[misc]
    def __init__(self, *, replies: Sequence[str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.replies = list(replies)
        self.prompts: list[str] = []

    def _inner_get_response(
        self, *, messages: Sequence[Message], stream: bool, options: Mapping[str, Any], **kwargs: Any
    ) -> Any:
        self.prompts.append(messages[-1].text if messages else "")
        text = self.replies.pop(0)

        async def respond() -> ChatResponse:
            return ChatResponse(messages=[Message(role="assistant", contents=[text])], response_id="scripted")

        return respond()


class ScriptedChatClient(FunctionInvocationLayer, _ScriptedClient):  # type: ignore[misc]
    """Replies with ``replies`` in order; ``prompts`` records what the agent sent."""
