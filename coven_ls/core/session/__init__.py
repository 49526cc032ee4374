"""The session room: one agent session (Claude Code, Codex) and its parts, each a module of one
job.

- `session.py`: `Session`, the commands clients and forks give it (a message, cancel, close).
- `state.py`: what a session is and has (`SessionState`: its figures and parts, `emit`,
  `set_status`), and its last turn's `Outcome`.
- `config.py`: what it runs with (`SessionConfig`, from the client's options).
- `inbox.py`: the turns queued for it, and the holds that keep them waiting.
- `runner.py`: the one task that runs its turns and alone opens and closes its agent process;
  `slot.py`: a fork child's slot for a turn; `permission.py`: its questions to the user.
- `process.py`: its agent process (opened, read, watched for silence, closed or killed).
- `publishing.py`: what the agent says, published: `mapping.py` (agent events as coven events),
  `streaming.py` (text while it streams, as deltas), the figures of each model call.
- `background.py`: the agent's background tasks; `event_log.py`: its numbered events;
  `record.py`: its row in the store; `status.py`: its allowed status changes.

Below the session, nothing imports it: each part reads the session's state (state.py).
"""

from .config import SessionConfig
from .session import Session, Sink
from .state import Outcome

__all__ = ["Outcome", "Session", "SessionConfig", "Sink"]
