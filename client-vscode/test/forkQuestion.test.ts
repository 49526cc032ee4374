import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { answerLinks, forkQuestionText, OpenForkQuestions, stillProposed, waitingText } from '../src/forkQuestion';
import { CovenModel } from '../src/model';
import { Stream } from './events';
import { eventsOf, loadFixture, replay, rootOf } from './fixtures';

// Recorded: the fork scenario (proposed, then approved and run) and the reject one.
const fork = loadFixture('fork');
const reject = loadFixture('reject');

const forkIdOf = (fixture: typeof fork): string => String(fixture.events.find((e) => e.kind === 'forkProposed')!.forkId);

/** The fixture replayed up to (not including) the first event of `kind`. */
const upTo = (fixture: typeof fork, kind: string): CovenModel => replay(fixture, new CovenModel(), (l) => l.event?.kind === kind);

class Asked {
  withdrawn = 0;
  withdraw(): void {
    this.withdrawn += 1;
  }
}

describe('fork questions', () => {
  for (const [fixture, decided] of [[fork, 'forkStarted'], [reject, 'forkRejected']] as const) {
    test(`a question stays while the fork is proposed and goes once ${decided} arrives (${fixture.name}.jsonl)`, () => {
      const forkId = forkIdOf(fixture);
      const model = upTo(fixture, decided);
      assert.equal(model.fork(forkId)?.state, 'proposed');
      const questions = new OpenForkQuestions<Asked>();
      const asked = new Asked();
      assert.ok(questions.add(forkId, asked));
      assert.ok(!questions.add(forkId, new Asked()), 'one question per fork');
      assert.deepEqual(questions.sweep(model), []);
      assert.equal(asked.withdrawn, 0);

      // The decision came from anywhere: all the client sees is the fork's state event.
      const decision = eventsOf(fixture, rootOf(fixture).sessionId).find((e) => e.kind === decided)!;
      model.ingest([decision]);
      assert.notEqual(model.fork(forkId)?.state, 'proposed');
      assert.deepEqual(questions.sweep(model), [forkId]);
      assert.equal(asked.withdrawn, 1);
      assert.equal(questions.size, 0);
      assert.deepEqual(questions.sweep(model), [], 'withdrawn once');
      assert.equal(asked.withdrawn, 1);
    });
  }

  test('a cancel of the parent withdraws its question (the fork is rejected: withdrawn)', () => {
    // Hand-built: no recording cancels a parent that awaits approval; protocol.md says the
    // proposal is then rejected (forkRejected, state rejected).
    const s = new Stream();
    const model = new CovenModel();
    model.ingest([
      s.ev('s1', 'prompt', { text: 'go', origin: 'user' }),
      s.status('s1', 'running'),
      s.ev('s1', 'forkProposed', { forkId: 'f1', state: 'proposed', tasks: ['a', 'b'] }),
      s.status('s1', 'awaitingApproval'),
    ]);
    const questions = new OpenForkQuestions<Asked>();
    const asked = new Asked();
    questions.add('f1', asked);
    assert.deepEqual(questions.sweep(model), []);
    model.ingest([s.ev('s1', 'forkRejected', { forkId: 'f1', state: 'rejected', reason: 'cancelled' }), s.status('s1', 'cancelled')]);
    assert.deepEqual(questions.sweep(model), ['f1']);
    assert.equal(asked.withdrawn, 1);
  });

  test('a fork the model no longer knows (a server restart reset it) is withdrawn too', () => {
    const forkId = forkIdOf(fork);
    const model = upTo(fork, 'forkStarted');
    const questions = new OpenForkQuestions<Asked>();
    const asked = new Asked();
    questions.add(forkId, asked);
    model.reset();
    assert.equal(stillProposed(model, forkId), false);
    assert.deepEqual(questions.sweep(model), [forkId]);
    assert.equal(asked.withdrawn, 1);
  });

  test('after a rebuild, a fork still proposed is asked about again; one asked about is not', () => {
    const forkId = forkIdOf(fork);
    const model = upTo(fork, 'forkStarted');
    const questions = new OpenForkQuestions<Asked>();
    questions.add(forkId, new Asked());
    model.reset();
    questions.sweep(model);
    assert.deepEqual(questions.unasked(model.proposedForks()), []);
    const rebuilt = upTo(fork, 'forkStarted'); // what the new server's listing and events give
    assert.deepEqual(questions.unasked(rebuilt.proposedForks()).map((f) => f.forkId), [forkId]);
    questions.add(forkId, new Asked());
    assert.deepEqual(questions.unasked(rebuilt.proposedForks()), []);
    rebuilt.ingest([eventsOf(fork, rootOf(fork).sessionId).find((e) => e.kind === 'forkStarted')!]);
    assert.deepEqual(questions.unasked(rebuilt.proposedForks()), [], 'a decided fork is asked about by nobody');
  });

  test('dispose withdraws every open question', () => {
    const questions = new OpenForkQuestions<Asked>();
    const a = new Asked();
    const b = new Asked();
    questions.add('f1', a);
    questions.add('f2', b);
    assert.deepEqual(questions.forkIds(), ['f1', 'f2']);
    questions.dispose();
    assert.deepEqual([a.withdrawn, b.withdrawn, questions.size], [1, 1, 0]);
  });

  test('the question names the session, the agent and the tasks, and links each answer to the fork', () => {
    const forkId = forkIdOf(fork);
    const model = upTo(fork, 'forkStarted');
    const node = model.fork(forkId)!;
    const session = model.session(node.sessionId)!;
    const text = forkQuestionText(node, session);
    assert.match(text, new RegExp(`^Claude proposes to fork '${session.title.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}' into ${node.tasks.length} tasks: “`));
    for (const task of node.tasks) assert.ok(text.includes(`“${task}”`), task);
    session.agent = 'codex';
    assert.match(forkQuestionText(node, session), /^Codex proposes/);
    const links = answerLinks(forkId);
    const arg = encodeURIComponent(JSON.stringify([forkId]));
    assert.equal(links, `[Approve](command:coven.approveFork?${arg}) · [Approve with Edits…](command:coven.approveForkWithEdits?${arg}) · [Reject](command:coven.rejectFork?${arg})`);
    assert.equal(waitingText(1), '$(repo-forked) Fork proposed');
    assert.equal(waitingText(2), '$(repo-forked) 2 forks proposed');
  });
});
