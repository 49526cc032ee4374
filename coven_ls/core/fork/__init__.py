"""The fork room: everything about forking a session into parallel children and bringing their
work back. This file imports nothing (`from coven_ls.core.fork.manager import ForkManager`), so
that the session can use the room's pure parts (spend.py, transcript.py) without loading the
manager.

The pure parts: `tag` (the `<fork>` tag, the instructions that teach it in prompts/fork.md, a
child's first message), `results` (`TaskResult`, the `<fork-results>` message), `choices` (a
fork's choices made whole), `spend` (what a child spends against its limits), `transcript` (a
parent's conversation written out for a child that cannot resume it), `estimate` (what a fork
would cost to start), `state` (a fork's states and allowed moves). `fork` is the fork itself,
`host` what the room needs from outside it (the hub, the journal), as protocols.

`manager` (`ForkManager`: proposals, decisions, cancels, a fork's start) runs a fork's life with
collaborators of its own: `ahead` (worktrees made while a proposal is asked, the pools
refilled), `children` (the children made and run; `child_env`: a worktree child's copies,
ports, setup and variables before it starts), `limits` (a child stopped at a limit),
`bring_back` (changes collected and merged, the results given), `review` (the user's decisions
on changes) and `restart` (forks a stopped server left: restored, resumed, abandoned).
"""
