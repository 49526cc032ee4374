""":class:`ScriptedModel`: the Messages API on the shared scripted server (http_base.py: its
rules, lifecycle and record), its request handler (server.py), its prompt cache
(prompt_cache.py), and the environment that points a CLI at it."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping

from .http_base import Matcher, Rule, ScriptedServer
from .prompt_cache import PromptCache
from .replies import Reply
from .request import ModelRequest
from .server import _Handler

__all__ = ["DEFAULT_TEXT", "Matcher", "Rule", "ScriptedModel"]

DEFAULT_TEXT = "(scripted model: no rule matched)"

# Variables that would make a child CLI believe it is nested in another Claude Code session,
# or send it to another provider / credential than the scripted model.
_ENV_TO_DROP = (
    "CLAUDECODE",
    "CLAUDE_CODE_SESSION_ID",
    "CLAUDE_CODE_ENTRYPOINT",
    "ANTHROPIC_AUTH_TOKEN",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "CLAUDE_CODE_USE_BEDROCK",
    "CLAUDE_CODE_USE_VERTEX",
    "ANTHROPIC_MODEL",
    "ANTHROPIC_SMALL_FAST_MODEL",
)


class ScriptedModel(ScriptedServer[ModelRequest]):
    """An Anthropic Messages API server that answers from rules; see scripted_model's module
    docstring."""

    handler = _Handler
    label = "scripted model"
    default_text = DEFAULT_TEXT

    def __init__(
        self,
        rules: Iterable[Rule] = (),
        default: Reply | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        log: Callable[[str], None] | None = None,
        cache: PromptCache | None = None,
    ) -> None:
        super().__init__(rules, default, host, port, log=log)
        # Charges every answered request's prompt as the API's prompt caching would
        # (prompt_cache.py); replace it (a clock, a minimum) before the first request.
        self.cache = cache if cache is not None else PromptCache()

    def _log_line(self, req: ModelRequest) -> str:
        return (
            f"{req.path} model={req.model} main={req.is_main_turn} rule={req.rule_index} "
            f"last_user={req.last_user_text[-80:]!r}"
        )

    def _describe(self, req: ModelRequest) -> str:
        return (
            f"{req.path} model={req.model!r} main={req.is_main_turn} rule={req.rule_index} "
            f"finished={req.finished is not None} last_user={req.last_user_text[-120:]!r}"
        )

    # --- pointing a CLI here

    def cli_env(self, config_dir: str | os.PathLike[str]) -> dict[str, str]:
        """Variables to merge into a CLI's environment (also drop :meth:`cli_environ`'s)."""
        return {
            "ANTHROPIC_BASE_URL": self.url,
            "ANTHROPIC_API_KEY": "scripted-model-key",
            "CLAUDE_CONFIG_DIR": os.fspath(config_dir),
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        }

    def cli_environ(
        self, config_dir: str | os.PathLike[str], base: Mapping[str, str] | None = None
    ) -> dict[str, str]:
        """A whole environment for a CLI child: ``base`` (os.environ) + :meth:`cli_env`,
        without nesting markers or credentials meant for other endpoints."""
        env = {k: v for k, v in (os.environ if base is None else base).items()}
        for name in _ENV_TO_DROP:
            env.pop(name, None)
        env.update(self.cli_env(config_dir))
        return env
