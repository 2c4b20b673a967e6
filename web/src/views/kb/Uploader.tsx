// Uploading to a base: "Upload files" and "Upload folder" (buttons that open hidden
// file inputs, which carry their own labels for scripts: "Upload files" / "Upload
// folder"), dropping files and folders anywhere on the base's page, and the list of this
// page's uploads with each file's progress and the server's reason for those refused.
import type { ComponentChildren } from "preact";
import { useRef, useState } from "preact/hooks";
import { t } from "../../i18n";
import { ACCEPT, buildFileList, filesFromDrop, fromFileList, type FileSelection } from "./files";
import { formatNumber, formatSize } from "./format";
import type { UploadItem, UploadsStore } from "./uploads";

function hasFiles(event: DragEvent): boolean {
  return Array.from(event.dataTransfer?.types ?? []).includes("Files");
}

/** Drop handling for an area: `dragging` while files are over it. */
export function useDrop(onFiles: (selection: FileSelection) => void, onError: (error: unknown) => void) {
  const [dragging, setDragging] = useState(false);
  const depth = useRef(0);
  return {
    dragging,
    handlers: {
      onDragEnter: (event: DragEvent) => {
        if (!hasFiles(event)) return;
        event.preventDefault();
        depth.current += 1;
        setDragging(true);
      },
      onDragOver: (event: DragEvent) => {
        if (!hasFiles(event)) return;
        event.preventDefault();
        if (event.dataTransfer) event.dataTransfer.dropEffect = "copy";
      },
      onDragLeave: () => {
        depth.current = Math.max(0, depth.current - 1);
        if (!depth.current) setDragging(false);
      },
      onDrop: (event: DragEvent) => {
        depth.current = 0;
        setDragging(false);
        if (!event.dataTransfer || !hasFiles(event)) return;
        event.preventDefault();
        // filesFromDrop reads the DataTransfer synchronously, before it is emptied
        filesFromDrop(event.dataTransfer).then(onFiles, onError);
      },
    },
  };
}

export function UploadButtons({
  onFiles,
  dragging,
  children,
}: {
  onFiles: (selection: FileSelection) => void;
  dragging: boolean;
  children?: ComponentChildren;
}) {
  const filesInput = useRef<HTMLInputElement>(null);
  const folderInput = useRef<HTMLInputElement>(null);
  const picked = (event: Event) => {
    const input = event.currentTarget as HTMLInputElement;
    if (input.files?.length) onFiles(buildFileList(fromFileList(input.files)));
    input.value = ""; // the same files can be picked again
  };
  return (
    <div class={dragging ? "kb-drop dragging" : "kb-drop"}>
      <div class="kb-upload-buttons">
        <button type="button" class="primary" onClick={() => filesInput.current?.click()}>
          {t("kb.upload.files")}
        </button>
        <button type="button" onClick={() => folderInput.current?.click()}>
          {t("kb.upload.folder")}
        </button>
        <input
          ref={filesInput}
          type="file"
          multiple
          accept={ACCEPT}
          hidden
          tabIndex={-1}
          aria-label={t("kb.upload.files")}
          onChange={picked}
        />
        <input
          ref={folderInput}
          type="file"
          multiple
          hidden
          tabIndex={-1}
          aria-label={t("kb.upload.folder")}
          // a folder picker: every file of the folder, with its webkitRelativePath
          {...{ webkitdirectory: true, directory: true }}
          onChange={picked}
        />
      </div>
      <p class="kb-drop-text" aria-hidden="true">
        {dragging ? t("kb.upload.dropActive") : t("kb.upload.drop")}
      </p>
      <p class="hint">{t("kb.upload.types")}</p>
      {children}
    </div>
  );
}

function stateText(item: UploadItem): string {
  if (item.state === "uploading" && item.size > 0) {
    return `${t("kb.upload.state.uploading")} ${Math.floor((item.loaded / item.size) * 100)}%`;
  }
  return t(`kb.upload.state.${item.state}`);
}

export function UploadList({ store }: { store: UploadsStore }) {
  const items = store.items.value;
  const skipped = store.skipped.value;
  const running = store.running.value;
  if (!items.length && !skipped.length) return null;
  const done = items.filter((item) => item.state === "done").length;
  const refused = items.filter((item) => item.state === "refused").length;
  return (
    <div class="kb-uploads">
      <div class="kb-uploads-head">
        <h3>{t("kb.upload.list")}</h3>
        <p class="kb-uploads-summary" role="status">
          {t("kb.upload.summary", { done: formatNumber(done), total: formatNumber(items.length) })}
          {refused > 0 && ` · ${t("kb.upload.summaryRefused", { count: formatNumber(refused) })}`}
        </p>
        {running ? (
          <button type="button" onClick={() => store.stop()}>
            {t("kb.upload.stop")}
          </button>
        ) : (
          <button type="button" onClick={() => store.clearFinished()}>
            {t("kb.upload.clear")}
          </button>
        )}
      </div>
      {items.length > 0 && (
        <ul class="kb-upload-items">
          {items.map((item) => (
            <li key={item.key} class={`kb-upload ${item.state}`}>
              <span class="kb-file-name">{item.path}</span>
              <span class="hint">{formatSize(item.size)}</span>
              {item.state === "refused" ? (
                <span />
              ) : (
                <progress
                  max={Math.max(item.size, 1)}
                  value={item.state === "done" ? Math.max(item.size, 1) : item.loaded}
                  aria-label={t("kb.upload.progress", { name: item.path })}
                />
              )}
              <span class="kb-upload-state">{stateText(item)}</span>
              {item.error && <p class="kb-reason">{item.error}</p>}
              {(item.state === "stopped" || (item.state === "refused" && item.retryable)) && (
                <button
                  type="button"
                  aria-label={t("kb.upload.retryOf", { name: item.path })}
                  onClick={() => store.retry(item.key)}
                >
                  {t("kb.upload.retry")}
                </button>
              )}
            </li>
          ))}
        </ul>
      )}
      {skipped.length > 0 && (
        <details class="kb-skipped">
          <summary>{t("kb.upload.skipped", { count: formatNumber(skipped.length) })}</summary>
          <ul>
            {skipped.map((path) => (
              <li key={path}>{path}</li>
            ))}
          </ul>
        </details>
      )}
    </div>
  );
}
