// Polling that ends: `tick` runs every `interval` ms (each after the previous one
// settled, never two at once) while it resolves true; it stops when a tick resolves false,
// when `stop()` is called (the view unmounts: the request in flight is aborted), or when
// `onError` says a failure is final. Failures otherwise back off, up to 10 s.

export interface PollOptions {
  interval?: number;
  /** Called with a failed tick's error; return false to stop polling. */
  onError?: (error: unknown) => boolean;
  /** Called once when polling ends by itself (a tick said false, or onError did), not
   * by stop(). */
  onDone?: () => void;
}

export function poll(
  tick: (signal: AbortSignal) => Promise<boolean>,
  { interval = 1000, onError, onDone }: PollOptions = {},
): () => void {
  const controller = new AbortController();
  let timer: ReturnType<typeof setTimeout> | undefined;
  let failures = 0;

  const schedule = (delay: number) => {
    if (!controller.signal.aborted) timer = setTimeout(run, delay);
  };

  async function run() {
    timer = undefined;
    let again: boolean;
    let delay = interval;
    try {
      again = await tick(controller.signal);
      failures = 0;
    } catch (error) {
      if (controller.signal.aborted) return;
      failures += 1;
      again = onError ? onError(error) : true;
      delay = Math.min(10_000, interval * 2 ** failures);
    }
    if (controller.signal.aborted) return;
    if (again) schedule(delay);
    else onDone?.();
  }

  schedule(interval);
  return () => {
    controller.abort();
    if (timer !== undefined) clearTimeout(timer);
  };
}
