export function AssistantsView() {
  return <section class="page">Assistants</section>;
}
