//! Training: layers, initialisers' fans, losses and metrics, optimizers (against Keras and
//! PyTorch), f16/bf16 (with the helpers of `half_util.rs`), checkpoints
//! and `.npy` files, the digits and GPT examples, and data-parallel training
//! (threads as ranks, and MPI when it is installed).
//!
//! One test binary (`cargo test --release --test nn`) for the files
//! below, each a module: `cargo test --release --test nn <file>::` runs
//! one of them.

mod half_util;
mod keras_util;
mod new_user_util;
mod sums_util;
// (shared with the ops tests, which use all of it)
#[allow(dead_code)]
#[path = "../ops/tf_util.rs"]
mod tf_util;

mod attention;
mod attention_causal;
mod attention_dropout;
mod attention_hidden_mean;
mod attention_masks;
mod attention_projection;
mod attention_torch_edges;
mod batch_norm_axis;
mod conv_groups;
mod conv_layers;
mod dense_activations;
mod digits;
mod distributed;
mod distributed_mpi;
mod dot_attention;
mod gpt;
mod gqa_views;
mod group_norm;
mod half;
mod half_nn;
mod half_optimizers;
mod init_fans;
mod io;
mod keras_losses;
mod keras_metrics;
mod keras_metrics_more;
mod layer_norm;
mod llama_parts;
mod masking;
mod mha_axes;
mod new_user_adamw;
mod new_user_adversarial;
mod new_user_batches;
mod new_user_bert;
mod new_user_capsule;
mod new_user_ddpm;
mod new_user_embed;
mod new_user_gp;
mod new_user_gpt;
mod new_user_graph_flow;
mod new_user_llama;
mod new_user_meta;
mod new_user_metric;
mod new_user_mobile;
mod new_user_models;
mod new_user_ode;
mod new_user_physics;
mod new_user_prob;
mod new_user_rl;
mod new_user_scaled;
mod new_user_scaled7;
mod new_user_scaled_more;
mod new_user_second_order;
mod new_user_seq2seq_attn;
mod new_user_seq_moe;
mod new_user_sets;
mod new_user_signal;
mod new_user_tabular;
mod new_user_tcn;
mod new_user_text;
mod new_user_unet;
mod new_user_vision;
mod new_user_vit;
mod nn;
mod optimizers;
mod optimizers_sparse;
mod rnn_layers;
mod rotary_op;
mod seq2seq;
mod transformer;
mod transformer_blocks;
mod transformer_padding;
mod transformer_sweep;
