"""The workspace: where a fork's children work, and how their work comes back to the parent.

Every child of a fork in `worktree` mode works in a git worktree of its own, on a branch of its
own, started from a snapshot of exactly what the parent sees; when it is done, its changes are
merged back into the parent's working tree as uncommitted edits. This room holds that, and
nothing of sessions or forks: it is below them, and they call it.

The git layer, plain blocking functions over the `git` command line (call them from a worker
thread), each module one job:

    git.py            running git (`git`, `GitError`), the git version it needs
    repository.py     the parent's repository: `inspect`, reading commits, files and branches
    snapshots.py      a fork's snapshot of the working tree
    submodules.py     the parent's submodules, checked out in a child's worktree
    worktrees.py      a child's worktree: create, prepare/adopt, reset, restore, remove, prune
    commits.py        a child's work as a commit on its branch; what was copied in, left out
    changes.py        what a child changed since the snapshot
    merge.py          the three-way merge into the parent's working tree (plans, then writes)
    working_tree.py   the working tree's files as the merge reads and writes them

The rule every one of them keeps: the user's HEAD, branches, index, stash and working tree are
never changed, except by `merge.merge_into_worktree`, which writes working-tree files and
nothing else. Git objects are written freely (snapshots, children's commits, merge results):
they are invisible until something points at them and `git gc` collects the unreachable ones.

The flow, for one fork of a parent working in the repository `info = repository.inspect(cwd)`:

    base = snapshots.snapshot(info)                          # once per fork
    child = worktrees.create(info, base, state_dir / "wt" / "f1-1", "coven/f1/1-tests")
    ...                                                      # the child works in child.path
    commits.commit_all(child.path, "coven: child 1")         # its work, on its branch
    result = merge.merge_into_worktree(info, base, child.branch)  # into the parent's tree
    worktrees.remove(info, child.path, child.branch, keep_branch=not result.ok)

Over it, what a fork uses (async, git in worker threads):

    isolation.py      a fork's worktrees: planned, made, collected, merged or reviewed
    pool.py           spare worktrees made ahead, per repository
    worktree_env.py   the `.worktreeinclude` copies into a child's worktree
    env_rewrite.py    those copies made the child's: paths into the parent's checkout rewritten
    worktree_setup.py the worktree setup command: where it comes from, approvals, running it
    ports.py          each child's block of ports
    prune.py          what `coven-ls prune` removes: worktrees and branches no session needs

A worktree child's environment as a whole (copies, ports, setup, variables:
`core/fork/child_env.py`) and which branches a deletion keeps (`core/keep.py`) work on sessions,
so they live with them.
"""
