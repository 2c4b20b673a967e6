// An error as a person reads it: the message, never a JSON dump.
import { ApiError } from "../api";
import { t } from "../i18n";

export function errorText(error: unknown): string {
  if (error instanceof ApiError) return error.message;
  if (error instanceof Error) return error.message;
  return String(error);
}

export function ErrorNote({ error, onRetry }: { error: unknown; onRetry?: () => void }) {
  return (
    <div class="error-note" role="alert">
      <span>{t("common.error", { message: errorText(error) })}</span>
      {onRetry && (
        <button type="button" onClick={onRetry}>
          {t("common.retry")}
        </button>
      )}
    </div>
  );
}
