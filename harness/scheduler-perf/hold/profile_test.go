package hold

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func write(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "profile.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestEveryProfileGetsTheHoldAndKeepsItsPlugins(t *testing.T) {
	path := write(t, `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
- schedulerName: other
  plugins:
    preEnqueue:
      enabled:
      - name: Mine
    score:
      disabled:
      - name: ImageLocality
`)
	out, err := WriteProfile(path, filepath.Join(t.TempDir(), "held.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var config struct {
		Kind     string
		Profiles []struct {
			SchedulerName string `json:"schedulerName"`
			Plugins       struct {
				PreEnqueue struct{ Enabled []struct{ Name string } } `json:"preEnqueue"`
				Score      struct{ Disabled []struct{ Name string } }
			}
		}
	}
	if err := yaml.Unmarshal(data, &config); err != nil {
		t.Fatal(err)
	}
	if config.Kind != "KubeSchedulerConfiguration" || len(config.Profiles) != 2 {
		t.Fatalf("the copy lost its kind or profiles:\n%s", data)
	}
	first, second := config.Profiles[0].Plugins, config.Profiles[1].Plugins
	if len(first.PreEnqueue.Enabled) != 1 || first.PreEnqueue.Enabled[0].Name != Name {
		t.Fatalf("the default profile's PreEnqueue: %+v, want only %s", first.PreEnqueue, Name)
	}
	if len(second.PreEnqueue.Enabled) != 2 || second.PreEnqueue.Enabled[0].Name != "Mine" ||
		second.PreEnqueue.Enabled[1].Name != Name {
		t.Fatalf("the second profile's PreEnqueue: %+v, want Mine then %s", second.PreEnqueue, Name)
	}
	if len(second.Score.Disabled) != 1 || second.Score.Disabled[0].Name != "ImageLocality" {
		t.Fatalf("the second profile's score plugins changed: %+v", second.Score)
	}
}

func TestAFileWithNoProfileIsAnErrorNamingIt(t *testing.T) {
	path := write(t, "kind: KubeSchedulerConfiguration\n")
	_, err := WriteProfile(path, filepath.Join(t.TempDir(), "held.yaml"))
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "no profiles") {
		t.Fatalf("err = %v, want one naming %s and its missing profiles", err, path)
	}
}

func TestAMissingFileIsAnErrorNamingIt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "absent.yaml")
	if _, err := WriteProfile(path, path+".out"); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("err = %v, want one naming %s", err, path)
	}
}
