import { describe, expect, it } from "vitest";
import {
  CAP,
  earlierRange,
  initialRange,
  keptRange,
  laterRange,
  nearBottom,
  nearTop,
  rangeAround,
  STEP,
  WINDOW,
  type Range,
} from "./windowing";

const size = (range: Range) => range.end - range.start;

describe("message windowing", () => {
  it("opens a 2,000-message conversation with the newest 60 rendered", () => {
    expect(WINDOW).toBe(60);
    expect(initialRange(2000)).toEqual({ start: 1940, end: 2000 });
    expect(initialRange(12)).toEqual({ start: 0, end: 12 });
    expect(initialRange(0)).toEqual({ start: 0, end: 0 });
  });

  it("renders 40 earlier ones at a time, dropping the last ones beyond 150", () => {
    expect(STEP).toBe(40);
    expect(CAP).toBe(150);
    expect(earlierRange({ start: 1940, end: 2000 })).toEqual({ start: 1900, end: 2000 });
    expect(earlierRange({ start: 1900, end: 2000 })).toEqual({ start: 1860, end: 2000 });
    expect(earlierRange({ start: 1860, end: 2000 })).toEqual({ start: 1820, end: 1970 });
    expect(earlierRange({ start: 30, end: 180 })).toEqual({ start: 0, end: 150 });
    expect(earlierRange({ start: 0, end: 150 })).toEqual({ start: 0, end: 150 });
    let range = initialRange(2000);
    let steps = 0;
    while (range.start > 0) {
      range = earlierRange(range);
      expect(size(range)).toBeLessThanOrEqual(CAP);
      steps++;
    }
    expect(steps).toBe(49);
    expect(range).toEqual({ start: 0, end: 150 });
  });

  it("renders 40 later ones at a time back down, dropping the first ones beyond 150", () => {
    expect(laterRange({ start: 0, end: 150 }, 2000)).toEqual({ start: 40, end: 190 });
    expect(laterRange({ start: 1820, end: 1970 }, 2000)).toEqual({ start: 1850, end: 2000 });
    expect(laterRange({ start: 1850, end: 2000 }, 2000)).toEqual({ start: 1850, end: 2000 });
    let range: Range = { start: 0, end: 150 };
    while (range.end < 2000) {
      range = laterRange(range, 2000);
      expect(size(range)).toBeLessThanOrEqual(CAP);
    }
    expect(range).toEqual({ start: 1850, end: 2000 });
  });

  it("follows new messages while the window reaches the end, within 150", () => {
    expect(keptRange({ start: 1940, end: 2000 }, 2000, 2002)).toEqual({ start: 1940, end: 2002 });
    expect(keptRange({ start: 1850, end: 2000 }, 2000, 2002)).toEqual({ start: 1852, end: 2002 });
    expect(keptRange({ start: 0, end: 10 }, 10, 12)).toEqual({ start: 0, end: 12 });
  });

  it("stays where it is away from the end", () => {
    expect(keptRange({ start: 1500, end: 1650 }, 2000, 2002)).toEqual({ start: 1500, end: 1650 });
    expect(keptRange({ start: 1500, end: 1650 }, 2000, 1990)).toEqual({ start: 1500, end: 1650 });
    // the list shrank below the window: the last 60 of it
    expect(keptRange({ start: 1500, end: 1650 }, 2000, 1520)).toEqual({ start: 1460, end: 1520 });
  });

  it("never shows fewer than 60 when messages go (a version deleted)", () => {
    expect(keptRange({ start: 1940, end: 2000 }, 2000, 1990)).toEqual({ start: 1930, end: 1990 });
    expect(keptRange({ start: 1900, end: 2000 }, 2000, 1990)).toEqual({ start: 1900, end: 1990 });
    expect(keptRange({ start: 40, end: 100 }, 100, 20)).toEqual({ start: 0, end: 20 });
  });

  it("brings a reply starting out of view into the window", () => {
    expect(rangeAround(2001, 2002)).toEqual({ start: 1942, end: 2002 });
    expect(rangeAround(10, 2002)).toEqual({ start: 0, end: 60 });
    expect(rangeAround(500, 2002)).toEqual({ start: 441, end: 501 });
  });

  it("follows the bottom within 80 px, and loads earlier near the top", () => {
    expect(nearBottom(920, 1000, 0)).toBe(true);
    expect(nearBottom(930, 1500, 500)).toBe(true);
    expect(nearBottom(800, 1500, 500)).toBe(false);
    expect(nearBottom(700, 1500, 500, 400)).toBe(true);
    expect(nearTop(0)).toBe(true);
    expect(nearTop(401)).toBe(false);
  });
});
