import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { poll } from "./poll";

beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

describe("poll", () => {
  it("ticks every interval until a tick says done, then stops by itself", async () => {
    let left = 3;
    const tick = vi.fn(async () => --left > 0);
    const onDone = vi.fn();
    poll(tick, { interval: 1000, onDone });
    expect(tick).not.toHaveBeenCalled();
    await vi.advanceTimersByTimeAsync(1000);
    expect(tick).toHaveBeenCalledTimes(1);
    await vi.advanceTimersByTimeAsync(1000);
    await vi.advanceTimersByTimeAsync(1000);
    expect(tick).toHaveBeenCalledTimes(3);
    expect(onDone).toHaveBeenCalledTimes(1);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(tick).toHaveBeenCalledTimes(3);
  });

  it("never runs two ticks at once: the next waits for a slow one", async () => {
    let running = 0;
    let most = 0;
    const tick = vi.fn(async () => {
      running += 1;
      most = Math.max(most, running);
      await new Promise((resolve) => setTimeout(resolve, 2500));
      running -= 1;
      return true;
    });
    const stop = poll(tick, { interval: 1000 });
    await vi.advanceTimersByTimeAsync(8000);
    stop();
    expect(most).toBe(1);
    expect(tick.mock.calls.length).toBeLessThanOrEqual(3);
  });

  it("stops at stop(), aborting the tick in flight and scheduling nothing more", async () => {
    let signal: AbortSignal | undefined;
    const tick = vi.fn(async (s: AbortSignal) => {
      signal = s;
      await new Promise((resolve) => setTimeout(resolve, 500));
      return true;
    });
    const onDone = vi.fn();
    const stop = poll(tick, { interval: 1000, onDone });
    await vi.advanceTimersByTimeAsync(1200);
    expect(tick).toHaveBeenCalledTimes(1);
    stop();
    expect(signal?.aborted).toBe(true);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(tick).toHaveBeenCalledTimes(1);
    expect(onDone).not.toHaveBeenCalled();
  });

  it("backs off after failures and stops when onError says the failure is final", async () => {
    const errors: unknown[] = [];
    let calls = 0;
    const tick = vi.fn(async () => {
      calls += 1;
      throw new Error(`fail ${calls}`);
    });
    const onDone = vi.fn();
    poll(tick, {
      interval: 1000,
      onError: (error) => {
        errors.push(error);
        return errors.length < 3;
      },
      onDone,
    });
    await vi.advanceTimersByTimeAsync(1000); // 1st
    expect(tick).toHaveBeenCalledTimes(1);
    await vi.advanceTimersByTimeAsync(1999);
    expect(tick).toHaveBeenCalledTimes(1); // waits 2 s after one failure
    await vi.advanceTimersByTimeAsync(1);
    expect(tick).toHaveBeenCalledTimes(2);
    await vi.advanceTimersByTimeAsync(4000); // then 4 s
    expect(tick).toHaveBeenCalledTimes(3);
    expect(onDone).toHaveBeenCalledTimes(1);
    await vi.advanceTimersByTimeAsync(60_000);
    expect(tick).toHaveBeenCalledTimes(3);
  });
});
