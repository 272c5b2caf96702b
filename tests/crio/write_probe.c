/* What a process in the CRI-O agent's container can do to the node through the agent's
 * storage mounts (tests/crio/test_crio_testbed.py builds this with gcc -static into a
 * one-file image and runs it with the agent's mounts). argv[1] is the agent's
 * --crio-storage root. One line per attempt, on stdout:
 *
 *   READ PATH | UNREADABLE PATH ERROR    the two files the agent reads
 *   WROTE PATH | REFUSED PATH ERROR      a new file in a storage directory, or in a
 *                                        container's root filesystem (removed at once)
 *   NO-ROOTFS PATH ERROR | ROOTFS N      whether overlay/ (every container's rootfs) is
 *                                        there at all, and how many merged dirs it holds
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void try_read(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        printf("UNREADABLE %s %s\n", path, strerror(errno));
        return;
    }
    printf("READ %s\n", path);
    close(fd);
}

static void try_write(const char *dir) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/.layersched-write-probe", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0) {
        printf("REFUSED %s %s\n", path, strerror(errno));
        return;
    }
    printf("WROTE %s\n", path);
    close(fd);
    unlink(path);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s CRIO_STORAGE_ROOT\n", argv[0]);
        return 2;
    }
    const char *root = argv[1];
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/overlay-images/images.json", root);
    try_read(path);
    snprintf(path, sizeof path, "%s/overlay-layers/layers.json", root);
    try_read(path);
    snprintf(path, sizeof path, "%s/overlay-images", root);
    try_write(path);
    snprintf(path, sizeof path, "%s/overlay-layers", root);
    try_write(path);
    snprintf(path, sizeof path, "%s/overlay", root);
    DIR *layers = opendir(path);
    if (layers == NULL) {
        printf("NO-ROOTFS %s %s\n", path, strerror(errno));
        return 0;
    }
    int merged = 0;
    struct dirent *entry;
    while ((entry = readdir(layers)) != NULL) {
        if (entry->d_name[0] == '.') continue;
        char dir[PATH_MAX];
        struct stat st;
        snprintf(dir, sizeof dir, "%s/%s/merged", path, entry->d_name);
        if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode)) {
            try_write(dir);
            merged++;
        }
    }
    closedir(layers);
    printf("ROOTFS %d\n", merged);
    return 0;
}
