// A modal question with a native <dialog> (focus trapped, Esc closes).
import { useEffect, useRef } from "preact/hooks";
import { t } from "../i18n";

interface Props {
  message: string;
  confirmLabel?: string;
  danger?: boolean;
  onConfirm: () => void;
  onCancel: () => void;
}

export function Confirm({ message, confirmLabel, danger = true, onConfirm, onCancel }: Props) {
  const dialog = useRef<HTMLDialogElement>(null);
  useEffect(() => {
    dialog.current?.showModal();
  }, []);
  return (
    <dialog ref={dialog} class="dialog" onCancel={onCancel} aria-label={message}>
      <p>{message}</p>
      <div class="dialog-actions">
        <button type="button" onClick={onCancel}>
          {t("common.cancel")}
        </button>
        <button type="button" class={danger ? "danger" : "primary"} onClick={onConfirm}>
          {confirmLabel ?? t("common.delete")}
        </button>
      </div>
    </dialog>
  );
}
