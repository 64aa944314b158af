// Finds the processes a run left behind, by three independent marks so that a
// process that escaped one (a new session, a rewritten environment) is still
// caught: its process group, a path of the run folder in its command line, and
// the run's marker variable in its environment.
import * as fs from 'node:fs';

export interface ProcessInfo {
  pid: number;
  pgid: number;
  cmdline: string;
  why: string[];
}

export interface RunMarks {
  /** Process group of the code-server started for the run (its leader's pid). */
  pgid?: number;
  /** The run folder: any process whose command line names it belongs to the run. */
  runDir: string;
  /** `NAME=value` put into code-server's environment and inherited by all it starts. */
  envMarker: string;
}

function readOrEmpty(file: string): Buffer {
  try {
    return fs.readFileSync(file);
  } catch {
    return Buffer.alloc(0); // the process ended meanwhile, or is not ours to read
  }
}

/** The process group id from /proc/<pid>/stat (the 5th field, after the parenthesised name). */
function pgidOf(pid: number): number | undefined {
  const stat = readOrEmpty(`/proc/${pid}/stat`).toString();
  const afterName = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const pgid = Number(afterName[2]);
  return Number.isFinite(pgid) ? pgid : undefined;
}

function isZombie(pid: number): boolean {
  const stat = readOrEmpty(`/proc/${pid}/stat`).toString();
  return stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z');
}

export function findRunProcesses(marks: RunMarks): ProcessInfo[] {
  const found: ProcessInfo[] = [];
  const markerBytes = Buffer.from(marks.envMarker + '\0');
  for (const entry of fs.readdirSync('/proc')) {
    const pid = Number(entry);
    if (!Number.isInteger(pid) || pid === process.pid) continue;
    if (isZombie(pid)) continue; // already dead, only waiting for its parent to reap it
    const why: string[] = [];
    const pgid = pgidOf(pid);
    if (marks.pgid !== undefined && pgid === marks.pgid) why.push('process group');
    const cmdline = readOrEmpty(`/proc/${pid}/cmdline`).toString().replace(/\0/g, ' ').trim();
    if (cmdline.includes(marks.runDir)) why.push('command line');
    if (readOrEmpty(`/proc/${pid}/environ`).includes(markerBytes)) why.push('environment');
    if (why.length > 0) found.push({ pid, pgid: pgid ?? -1, cmdline, why });
  }
  return found;
}

export function describeProcesses(list: ProcessInfo[]): string {
  return list.map((p) => `  pid ${p.pid} (pgid ${p.pgid}, by ${p.why.join('+')}): ${p.cmdline.slice(0, 200)}`).join('\n');
}
