// The original Observational Memory (@mastra/memory), driven in-process as an agent loop drives it,
// with instant scripted models, over the conversation omstream's benches use.
//
//   node bench/original/run.mjs --bodies BODIES.json [--messages 2000] [--message-tokens 3000]
//                                [--buffering on|off|both] [--baseline]
//
// BODIES.json is a JSON list of message texts (~200 tokens each; `python -m bench.original`
// writes it from bench.fold_bench.make_bodies, as bench.e2e does). One thread; each turn is
// `agent.generate(user text)` answered by a mock model with the next text, so a turn adds 2
// messages, and OM's processors run in the agent loop as they do for a user of the package:
// before each step (thresholds, buffering, activation, blocking observation) and after the
// result (the messages saved). Observer and Reflector are mock models that answer at once with a
// fixed observation. Prints one JSON object per run on stdout; progress goes to stderr.
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';

import { Agent } from '@mastra/core/agent';
import { InMemoryStore } from '@mastra/core/storage';
import { Memory } from '@mastra/memory';
import { MockLanguageModelV2 } from 'ai/test';

const { values: args } = parseArgs({
  options: {
    bodies: { type: 'string' },
    messages: { type: 'string', default: '2000' },
    'message-tokens': { type: 'string', default: '3000' },
    buffering: { type: 'string', default: 'both' },
    baseline: { type: 'boolean', default: false },
  },
});
if (!args.bodies) throw new Error('--bodies FILE is required (a JSON list of message texts)');
const bodies = JSON.parse(readFileSync(args.bodies, 'utf8'));
const messages = Number(args.messages);
const messageTokens = Number(args['message-tokens']);

const OBSERVATION = [
  '<observations>',
  'Date: Mar 3, 2025',
  '* 🔴 (09:00) User is planning a trip and compared several options with the assistant.',
  '* 🟡 (09:05) Assistant listed the trade-offs; user has not decided yet.',
  '</observations>',
  '<current-task>Help the user decide.</current-task>',
  '<suggested-response>Ask which option matters most.</suggested-response>',
].join('\n');

/** A mock model that answers every call at once with `text()` (generate and stream). */
function scripted(id, text) {
  let calls = 0;
  const usage = { inputTokens: 1, outputTokens: 1, totalTokens: 2 };
  const model = new MockLanguageModelV2({
    provider: 'scripted',
    modelId: id,
    doGenerate: async () => {
      calls += 1;
      return { content: [{ type: 'text', text: text() }], finishReason: 'stop', usage, warnings: [] };
    },
    doStream: async () => {
      calls += 1;
      const parts = [
        { type: 'stream-start', warnings: [] },
        { type: 'text-start', id: 't' },
        { type: 'text-delta', id: 't', delta: text() },
        { type: 'text-end', id: 't' },
        { type: 'finish', finishReason: 'stop', usage },
      ];
      return { stream: new ReadableStream({ start(c) { parts.forEach((p) => c.enqueue(p)); c.close(); } }) };
    },
  });
  return { model, calls: () => calls };
}

async function run(buffering, withOm) {
  let next = 0;
  const body = () => bodies[next++ % bodies.length];
  const assistant = scripted('assistant', body);
  const observer = scripted('observer', () => OBSERVATION);
  const reflector = scripted('reflector', () => OBSERVATION);
  const om = withOm && {
    scope: 'thread',
    observation: { model: observer.model, messageTokens, bufferTokens: buffering ? undefined : false },
    reflection: { model: reflector.model },
  };
  const memory = new Memory({
    storage: new InMemoryStore(),
    options: { lastMessages: false, observationalMemory: om || false },
  });
  const agent = new Agent({ id: 'bench', name: 'bench', instructions: 'You are a helpful assistant.',
                            model: assistant.model, memory });
  const turns = Math.ceil(messages / 2);
  const turn = (i) => agent.generate(body(), { memory: { thread: 'thread-1', resource: 'user-1' } });
  await turn(-1); // imports, storage set-up and first compilation are not timed
  const startedElu = performance.eventLoopUtilization();
  const startedCpu = process.cpuUsage();
  const started = performance.now();
  for (let i = 0; i < turns; i++) {
    await turn(i);
    if (i % 100 === 99) process.stderr.write(`[original] ${withOm ? `buffering ${buffering ? 'on' : 'off'}` : 'no OM'}: ${2 * (i + 1)} messages\n`);
  }
  // Background buffering cycles started by the last turns belong to the run.
  if (withOm) await memory.omEngine?.settled?.();
  const seconds = (performance.now() - started) / 1000;
  const cpu = process.cpuUsage(startedCpu);
  // The share of the wall time the event loop sat waiting (timers, I/O): time the original spends
  // waiting by design, as opposed to time the OS gave to other processes (counted as busy).
  const elu = performance.eventLoopUtilization(startedElu);
  return {
    run: withOm ? (buffering ? 'buffering on' : 'buffering off') : 'agent loop without OM',
    messages: 2 * turns,
    seconds,
    messages_per_s: (2 * turns) / seconds,
    cpu_seconds: (cpu.user + cpu.system) / 1e6,
    loop_idle_share: 1 - elu.utilization,
    observer_calls: observer.calls(),
    reflector_calls: reflector.calls(),
    assistant_calls: assistant.calls() - 1,
  };
}

const modes = { on: [true], off: [false], both: [true, false] }[args.buffering];
if (!modes) throw new Error(`--buffering must be on, off or both, not ${args.buffering}`);
const versions = Object.fromEntries(['@mastra/core', '@mastra/memory', 'ai'].map((name) => [
  name, JSON.parse(readFileSync(new URL(`./node_modules/${name}/package.json`, import.meta.url))).version]));
const runs = [];
for (const buffering of modes) runs.push(await run(buffering, true));
if (args.baseline) runs.push(await run(false, false));
console.log(JSON.stringify({ node: process.version, versions, message_tokens: messageTokens, runs }));
