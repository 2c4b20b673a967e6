export function SettingsView() {
  return <section class="page">Settings</section>;
}
