// ‹ 2/3 › between the versions of a message (POST .../select, then the conversation as
// the server shows it).
import { t } from "../../i18n";
import type { Versions } from "../../types";
import { Icon } from "../../components/icons";

interface Props {
  versions: Versions | undefined;
  disabled: boolean;
  onSelect: (messageId: string) => void;
}

export function VersionNav({ versions, disabled, onSelect }: Props) {
  if (!versions || versions.count < 2) return null;
  const { index, ids, count } = versions;
  const previous = ids[index - 1];
  const next = ids[index + 1];
  return (
    <span class="version-nav" role="group" aria-label={t("chat.versions")}>
      <button
        type="button"
        class="icon"
        aria-label={t("chat.previousVersion")}
        title={t("chat.previousVersion")}
        disabled={disabled || !previous}
        onClick={() => previous && onSelect(previous)}
      >
        <Icon name="previous" />
      </button>
      <span class="version-count" aria-label={t("chat.versionOf", { index: index + 1, count })}>
        {index + 1}/{count}
      </span>
      <button
        type="button"
        class="icon"
        aria-label={t("chat.nextVersion")}
        title={t("chat.nextVersion")}
        disabled={disabled || !next}
        onClick={() => next && onSelect(next)}
      >
        <Icon name="next" />
      </button>
    </span>
  );
}
