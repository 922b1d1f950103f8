/** Progress for people watching a long run; stdout stays for the table. */
const started = performance.now();

export function log(line: string): void {
  const s = ((performance.now() - started) / 1000).toFixed(1).padStart(6);
  process.stderr.write(`[bench ${s}s] ${line}\n`);
}
