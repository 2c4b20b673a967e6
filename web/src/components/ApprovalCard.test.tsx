import { act, cleanup, fireEvent, render, screen } from "@testing-library/preact";
import { afterEach, describe, expect, test, vi } from "vitest";
import { type ApprovalDecision, ApprovalCard, formatRemaining } from "./ApprovalCard";

afterEach(() => {
  cleanup();
  vi.useRealTimers();
});

const pending = { id: "call_7", tool: "delete_file", arguments: '{"path":"/tmp/x"}' };

function setup(extra: Partial<typeof pending & { expires_at: number; expired: boolean }> = {}, disabled = false) {
  const decisions: ApprovalDecision[] = [];
  const view = render(
    <ApprovalCard pending={{ ...pending, ...extra }} disabled={disabled} onDecide={(d) => decisions.push(d)} />,
  );
  return { decisions, view, card: screen.getByRole("article", { name: "Approval needed: delete_file" }) };
}

describe("ApprovalCard", () => {
  test("shows the tool and its arguments", () => {
    const { card } = setup();
    expect(card.textContent).toContain("Run delete_file?");
    expect(card.querySelector("pre")?.textContent).toBe('{\n  "path": "/tmp/x"\n}');
  });

  test("Approve reports one decision, with the arguments shown, then shows it as decided", () => {
    const { decisions, card } = setup();
    fireEvent.click(screen.getByRole("button", { name: "Approve" }));
    expect(decisions).toEqual([{ tool_call_id: "call_7", decision: "approve", arguments: '{"path":"/tmp/x"}' }]);
    expect(screen.getByRole("status").textContent).toBe("Approved");
    expect(card.querySelectorAll("button").length).toBe(0);
  });

  test("Deny opens a reason field; Deny confirms it", () => {
    const { decisions } = setup();
    fireEvent.click(screen.getByRole("button", { name: "Deny" }));
    const reason = screen.getByLabelText("Reason (optional)") as HTMLInputElement;
    expect(document.activeElement).toBe(reason);
    expect(screen.queryByRole("button", { name: "Approve" })).toBeNull();
    fireEvent.input(reason, { target: { value: "  not that file  " } });
    fireEvent.click(screen.getByRole("button", { name: "Deny" }));
    expect(decisions).toEqual([{ tool_call_id: "call_7", decision: "deny", reason: "not that file" }]);
    expect(screen.getByRole("status").textContent).toBe("Denied: not that file");
  });

  test("a denial needs no reason", () => {
    const { decisions } = setup();
    fireEvent.click(screen.getByRole("button", { name: "Deny" }));
    fireEvent.submit(screen.getByLabelText("Reason (optional)").closest("form")!);
    expect(decisions).toEqual([{ tool_call_id: "call_7", decision: "deny" }]);
    expect(screen.getByRole("status").textContent).toBe("Denied");
  });

  test("Cancel (or Esc) goes back to the three choices", () => {
    setup();
    fireEvent.click(screen.getByRole("button", { name: "Deny" }));
    fireEvent.click(screen.getByRole("button", { name: "Cancel" }));
    expect(screen.getByRole("button", { name: "Approve" })).not.toBeNull();
    fireEvent.click(screen.getByRole("button", { name: "Answer instead" }));
    fireEvent.keyDown(screen.getByLabelText("Your answer"), { key: "Escape" });
    expect(screen.getByRole("button", { name: "Answer instead" })).not.toBeNull();
  });

  test("Answer instead sends the person's text in the tool's place", () => {
    const { decisions } = setup();
    fireEvent.click(screen.getByRole("button", { name: "Answer instead" }));
    const send = screen.getByRole("button", { name: "Send answer" }) as HTMLButtonElement;
    expect(send.disabled).toBe(true); // nothing to send yet
    fireEvent.input(screen.getByLabelText("Your answer"), { target: { value: "The file is gone already." } });
    fireEvent.click(screen.getByRole("button", { name: "Send answer" }));
    expect(decisions).toEqual([{ tool_call_id: "call_7", decision: "answer", answer: "The file is gone already." }]);
    expect(screen.getByRole("status").textContent).toBe("Answered: The file is gone already.");
  });

  test("an expired call cannot be approved, says why, and can still be denied or answered", () => {
    const { decisions, card } = setup({ expired: true });
    const approve = screen.getByRole("button", { name: "Approve" }) as HTMLButtonElement;
    expect(approve.disabled).toBe(true);
    const hint = document.getElementById(approve.getAttribute("aria-describedby")!);
    expect(hint?.textContent).toBe("This request has expired: it can only be denied or answered, no longer approved.");
    expect(card.querySelector(".approval-timer")?.textContent).toBe("Expired");
    expect((screen.getByRole("button", { name: "Deny" }) as HTMLButtonElement).disabled).toBe(false);
    fireEvent.click(screen.getByRole("button", { name: "Answer instead" }));
    fireEvent.input(screen.getByLabelText("Your answer"), { target: { value: "no" } });
    fireEvent.click(screen.getByRole("button", { name: "Send answer" }));
    expect(decisions.map((d) => d.decision)).toEqual(["answer"]);
  });

  test("counts down to the expiry, then behaves as expired", () => {
    vi.useFakeTimers();
    vi.setSystemTime(new Date("2025-01-01T00:00:00Z"));
    const { card } = setup({ expires_at: Date.parse("2025-01-01T00:00:03Z") / 1000 });
    expect(card.querySelector(".approval-timer")?.textContent).toBe("Expires in 0:03");
    act(() => void vi.advanceTimersByTime(1000));
    expect(card.querySelector(".approval-timer")?.textContent).toBe("Expires in 0:02");
    act(() => void vi.advanceTimersByTime(2000));
    expect(card.querySelector(".approval-timer")?.textContent).toBe("Expired");
    expect((screen.getByRole("button", { name: "Approve" }) as HTMLButtonElement).disabled).toBe(true);
  });

  test("disabled (a decision being sent) disables every control", () => {
    setup({}, true);
    for (const name of ["Approve", "Deny", "Answer instead"]) {
      expect((screen.getByRole("button", { name }) as HTMLButtonElement).disabled).toBe(true);
    }
  });

  test("a tool named with HTML is shown as text", () => {
    const decisions: ApprovalDecision[] = [];
    const tool = "<img src=x onerror=alert(1)>";
    render(<ApprovalCard pending={{ id: "c", tool, arguments: tool }} onDecide={(d) => decisions.push(d)} />);
    const card = screen.getByRole("article", { name: `Approval needed: ${tool}` });
    expect(card.querySelector("img")).toBeNull();
    expect(card.textContent).toContain(tool);
  });

  test("remaining time reads as m:ss or h:mm:ss", () => {
    expect(formatRemaining(299)).toBe("4:59");
    expect(formatRemaining(3723)).toBe("1:02:03");
    expect(formatRemaining(-5)).toBe("0:00");
  });
});
