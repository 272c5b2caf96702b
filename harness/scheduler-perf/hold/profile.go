package hold

import (
	"fmt"
	"os"

	"sigs.k8s.io/yaml"
)

// WriteProfile writes a copy of the KubeSchedulerConfiguration file at path to out with
// the plugin enabled at PreEnqueue in each of its profiles, and returns out. Every
// profile gets it alike; it lets every unlabelled pod through untouched.
func WriteProfile(path, out string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading profile %s: %w", path, err)
	}
	config := map[string]any{}
	if err := yaml.Unmarshal(data, &config); err != nil {
		return "", fmt.Errorf("decoding profile %s: %w", path, err)
	}
	profiles, _ := config["profiles"].([]any)
	if len(profiles) == 0 {
		return "", fmt.Errorf("profile %s: no profiles to hold pods in", path)
	}
	for i, p := range profiles {
		profile, ok := p.(map[string]any)
		if !ok {
			return "", fmt.Errorf("profile %s: profiles[%d] is not a mapping", path, i)
		}
		preEnqueue := child(child(profile, "plugins"), "preEnqueue")
		enabled, _ := preEnqueue["enabled"].([]any)
		preEnqueue["enabled"] = append(enabled, map[string]any{"name": Name})
	}
	if data, err = yaml.Marshal(config); err != nil {
		return "", err
	}
	return out, os.WriteFile(out, data, 0o644)
}

// child returns parent[key] as a mapping, making it when it is missing.
func child(parent map[string]any, key string) map[string]any {
	m, _ := parent[key].(map[string]any)
	if m == nil {
		m = map[string]any{}
		parent[key] = m
	}
	return m
}
