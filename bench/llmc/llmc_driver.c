/* A driver for llm.c's CPU reference trainer (karpathy/llm.c, train_gpt2.c),
 * for bench/gpt_reference.sh only: it is compiled against a checkout of
 * llm.c the caller names (never part of tandem's build) and calls llm.c's
 * own functions, so tandem's GPT is compared with the reference itself.
 *
 *   llmc_driver MODEL.bin TOKENS.bin STEPS LR WEIGHT_DECAY
 *
 * MODEL.bin is an llm.c checkpoint (magic 20240326, version 3); TOKENS.bin
 * the batch bench/gpt_reference writes: int32 magic 20241124, B, T, then
 * inputs [B*T] and targets [B*T] as int32. Trains STEPS AdamW steps on that
 * one batch (llm.c's betas 0.9 / 0.999, eps 1e-8, as its tests do) and
 * prints one row per step, then the loss after the last update:
 *   step <i> loss <loss before the update> ms <forward+backward+update>
 *   final loss <loss> */
#define TESTING
#include "train_gpt2.c"

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: llmc_driver MODEL.bin TOKENS.bin STEPS LR WEIGHT_DECAY\n");
        return 2;
    }
    GPT2 model;
    gpt2_build_from_checkpoint(&model, argv[1]);
    FILE *f = fopen(argv[2], "rb");
    int header[3];
    if (!f || fread(header, sizeof(int), 3, f) != 3 || header[0] != 20241124) {
        fprintf(stderr, "llmc_driver: %s is not a token batch of bench/gpt_reference\n", argv[2]);
        return 1;
    }
    int B = header[1], T = header[2], steps = atoi(argv[3]);
    float lr = (float)atof(argv[4]), wd = (float)atof(argv[5]);
    int *x = malloc(sizeof(int) * (size_t)B * T), *y = malloc(sizeof(int) * (size_t)B * T);
    if (fread(x, sizeof(int), (size_t)B * T, f) != (size_t)B * T || fread(y, sizeof(int), (size_t)B * T, f) != (size_t)B * T) {
        fprintf(stderr, "llmc_driver: %s is short\n", argv[2]);
        return 1;
    }
    fclose(f);
    for (int step = 0; step < steps; step++) {
        struct timespec start, end;
        clock_gettime(CLOCK_MONOTONIC, &start);
        gpt2_forward(&model, x, y, B, T);
        gpt2_zero_grad(&model);
        gpt2_backward(&model);
        gpt2_update(&model, lr, 0.9f, 0.999f, 1e-8f, wd, step + 1);
        clock_gettime(CLOCK_MONOTONIC, &end);
        double ms = (end.tv_sec - start.tv_sec) * 1e3 + (end.tv_nsec - start.tv_nsec) / 1e6;
        printf("step %d loss %.9g ms %.3f\n", step, model.mean_loss, ms);
        fflush(stdout);
    }
    gpt2_forward(&model, x, y, B, T);
    printf("final loss %.9g\n", model.mean_loss);
    gpt2_free(&model);
    free(x);
    free(y);
    return 0;
}
